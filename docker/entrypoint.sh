#!/bin/sh
# Container entrypoint: apply the database migrations, then serve the API with uvicorn.
# Every setting comes from PRIVFIT_* environment variables (see README, "Configuration").
# With arguments, run them instead: `docker compose run --rm api privfit create-site "Bank A"`.
set -eu

if [ "$#" -gt 0 ]; then
    exec "$@"
fi

privfit migrate
exec privfit serve
