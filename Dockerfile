# PrivFit production image: `docker build -t privfit .`, then see README ("Container").
# The base image is pinned by digest (the python:3.11-slim index as published on Docker Hub), so a
# rebuild gets the same bits; refresh it deliberately with
# `docker buildx imagetools inspect python:3.11-slim`.
FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# 1. Dependencies only, exactly as locked (versions and hashes, `make lock`): this layer is
#    rebuilt only when the lock changes, and a tampered or substituted wheel fails the build.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

# 2. The service itself (no dependency resolution: all of them are installed above), its
#    migrations (found via /app/pyproject.toml) and the entrypoint.
COPY pyproject.toml README.md ./
COPY service ./service
COPY migrations ./migrations
COPY docker/entrypoint.sh /usr/local/bin/privfit-entrypoint
RUN pip install --no-deps . \
    && rm -rf service build ./*.egg-info \
    && chmod 0755 /usr/local/bin/privfit-entrypoint \
    && useradd --system --uid 10001 --user-group --home-dir /app --no-create-home privfit \
    && mkdir -p /app/data \
    && chown privfit:privfit /app/data

# Production: PostgreSQL only (PRIVFIT_DATABASE_URL=postgresql+psycopg://...), on all interfaces.
# matplotlib (the planner's PNG) keeps its font cache in a writable place: /app is not.
ENV PRIVFIT_ENVIRONMENT=prod \
    PRIVFIT_HOST=0.0.0.0 \
    PRIVFIT_PORT=8000 \
    MPLCONFIGDIR=/tmp/matplotlib

USER privfit
EXPOSE 8000

# HEALTHCHECK is part of the Docker image format: build with `docker build` (or `podman build
# --format docker`); an OCI-format image (podman's and buildah's default) silently drops it.
# docker-compose.yml states the same check for the api service, so Compose has it either way.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('PRIVFIT_PORT', '8000'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]

ENTRYPOINT ["privfit-entrypoint"]
