# SWE layer 3 of 3 (instance): the repository at base_commit as a scrubbed one-commit git repo,
# installed editable at /workspace/repo -- the path it is copied back to in every container, whose
# /workspace is a fresh tmpfs -- and kept read-only at /opt/swe/repo as the pristine copy.
# The install must leave the tracked files untouched: the agent's diff is taken against them.
# VERSION_ENV: NAME=VALUE words for the install (the pretend version of a repository whose version comes from
# git, tasks/swe/images.py: version_environment), or empty.
ARG BASE
FROM ${BASE}
ARG VERSION_ENV=""
COPY repo /workspace/repo
RUN cd /workspace/repo \
 && env ${VERSION_ENV} python3 -m pip install --no-index --find-links /opt/swe/wheels --break-system-packages \
      --root-user-action=ignore --no-cache-dir --disable-pip-version-check -e . \
 && changed="$(git status --porcelain --untracked-files=no)" \
 && if [ -n "$changed" ]; then echo "the install changed tracked files: $changed" >&2; exit 1; fi \
 && cp -a /workspace/repo /opt/swe/repo \
 && chmod -R a+rX,go-w /opt/swe/repo
