# syntax=docker/dockerfile:1
# inferline's plain Python images, one recipe: middleman, batcher, eds, envoy and preflight. Each
# image is this file with its build arguments, which tools/images.py's IMAGES hold (make images
# passes them; `python -m tools.images --registry R --tag T --dry-run NAME` prints the command):
#   DIST          the distribution's folder, copied into the build: services/batcher
#   REQUIREMENTS  pip's requirement arguments: ./common ./services/batcher, ./envoy[binary]
#   COMMAND       what the image runs, a console script in /opt/venv/bin (inferline-batcher,
#                 envoy), linked to inferline-entrypoint: the one exec-form ENTRYPOINT
#   TITLE, DESCRIPTION  the OCI title and description
#   PORTS         the container ports to EXPOSE (k8s/CONTRACT.md); an image with none (the
#                 preflight, an init container) is target runtime
# Build context: the repository root (k8s/CONTRACT.md), e.g.
#   docker build -f docker/python.Dockerfile --build-arg DIST=services/batcher \
#     --build-arg REQUIREMENTS="./common ./services/batcher" --build-arg COMMAND=inferline-batcher \
#     --build-arg TITLE=inferline-batcher --build-arg DESCRIPTION="inferline's batcher" \
#     --build-arg PORTS="8092 9182" -t inferline-batcher .
# Stage build: a virtual environment at /opt/venv with the distribution and the siblings its
# pyproject.toml names, at the versions in constraints.txt. Final stages: that environment on the
# same Python image, nothing else: no pip cache, no compiler, not root.

FROM python:3.11.11-slim-bookworm AS build
# /opt/build's pip installs into /opt/venv, which gets no pip or setuptools of its own: nothing
# installs at run time, so the runtime image carries no installer.
RUN python -m venv /opt/build && python -m venv --without-pip /opt/venv
WORKDIR /src
COPY constraints.txt ./
COPY common/ common/
# Declared after the steps every image shares, which stay one cached layer for all of them.
ARG DIST
ARG REQUIREMENTS
ARG COMMAND
RUN test -n "${DIST}" && test -n "${REQUIREMENTS}" && test -n "${COMMAND}" \
    || { echo "DIST, REQUIREMENTS and COMMAND are required: make images passes them" >&2; exit 1; }
COPY ${DIST}/ ${DIST}/
# REQUIREMENTS is pip's arguments: split into words, never globbed (set -f; ./envoy[binary]).
RUN set -f \
    && /opt/build/bin/pip --python /opt/venv/bin/python install --no-cache-dir \
        --disable-pip-version-check -c constraints.txt ${REQUIREMENTS} \
    && test -x "/opt/venv/bin/${COMMAND}" \
    && ln -s "${COMMAND}" /opt/venv/bin/inferline-entrypoint

FROM python:3.11.11-slim-bookworm AS runtime
RUN groupadd --system --gid 10001 inferline \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin inferline
ARG SOURCE_URL=""
ARG TITLE
ARG DESCRIPTION
LABEL org.opencontainers.image.title="${TITLE}" \
      org.opencontainers.image.description="${DESCRIPTION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
# COMMAND under a fixed name: exec form expands no build argument; Kubernetes' args follow it.
ENTRYPOINT ["inferline-entrypoint"]

# The default: a server, with its ports (EXPOSE refuses none, hence the runtime target).
FROM runtime AS server
ARG PORTS
EXPOSE ${PORTS}
