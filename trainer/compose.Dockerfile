# The image of the compose.yaml services (policy server, trainer + rollout workers, GC reaper): its own
# Python, the project's dependencies and the project's source; nothing of the host's at run time.
#
# The build context is build/compose/ (git-ignored), staged on the host by `bash bin/compose-context`:
#   requirements.txt  the [project] dependencies of pyproject.toml
#   constraints.txt   the host's `pip freeze`, so the image runs the versions the host runs and tests
#   wheels/           every one of those dependencies as a wheel (`pip wheel`: the host's pip settings,
#                     and the CPU torch build that torch==2.13.0 resolves to there)
#   src/              the checkout's files as git lists them (tracked, or untracked and not ignored)
# The build needs no network (compose.yaml sets build.network: none) and no registry: BASE is this
# checkout's gym-runner image, built locally from Debian packages by `python -m gym images build`. Its
# Debian python3 (3.11) runs the venv; the wheels are cp311 builds for the same architecture.
ARG BASE

# The venv in a stage of its own: the wheels (about 0.7 GB) stay out of the final image's layers.
FROM ${BASE} AS deps
COPY requirements.txt constraints.txt /tmp/deps/
COPY wheels /tmp/deps/wheels
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --no-cache-dir --disable-pip-version-check \
      --find-links /tmp/deps/wheels -r /tmp/deps/requirements.txt -c /tmp/deps/constraints.txt

FROM ${BASE}
# A source change rebuilds only the layers below this one (the venv layer comes from the build cache).
COPY --from=deps /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 PYTHONUNBUFFERED=1
WORKDIR /app
COPY src /app
# The default tokenizer lives in build/tokenizer/ (git-ignored, so not in src/): trained here, as
# bin/setup does on the host; the training is deterministic, so it is the host's file byte for byte.
RUN python -m gym tokenizer train
ENV PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT []
CMD ["python", "-m", "gym", "--help"]
