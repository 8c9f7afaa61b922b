# PrivFit production image: `docker build -t privfit .`, then see README ("Container").
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# 1. Dependencies only, from pyproject.toml: this layer is rebuilt only when they change.
COPY pyproject.toml README.md ./
RUN mkdir service && touch service/__init__.py \
    && pip install . \
    && pip uninstall --yes privfit \
    && rm -rf service build ./*.egg-info

# 2. The service itself, its migrations (found via /app/pyproject.toml) and the entrypoint.
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
ENV PRIVFIT_ENVIRONMENT=prod \
    PRIVFIT_HOST=0.0.0.0 \
    PRIVFIT_PORT=8000

USER privfit
EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('PRIVFIT_PORT', '8000'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]

ENTRYPOINT ["privfit-entrypoint"]
