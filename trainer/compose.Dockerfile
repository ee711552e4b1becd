# The image of the compose.yaml services (policy server, trainer + rollout workers, GC reaper).
# FROM the gym's base root filesystem (built locally from Debian packages by `python -m gym images
# build`; gym-runner:<hash> is that base plus the sandbox runner, and compose passes its tag as BASE)
# -- no registry is involved. The image carries no Python packages: compose mounts the host's Python
# environment (the one bin/setup installed into) read-only at the same path, and the repository at /app.
ARG BASE
FROM ${BASE}
ENV LANG=C.UTF-8 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/app
WORKDIR /app
ENTRYPOINT []
CMD ["sleep", "infinity"]
