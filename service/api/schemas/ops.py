"""Health and readiness."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from service.api.schemas.base import ResponseModel

__all__ = ["Health", "Readiness"]


class Health(ResponseModel):
    """The process is alive."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})

    status: Literal["ok"] = "ok"


class Readiness(ResponseModel):
    """The service can handle requests: its database is reachable and fully migrated."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"status": "ready", "database": "ok", "revision": "70c1a39f737a"}]
        }
    )

    status: Literal["ready"] = "ready"
    database: Literal["ok"] = "ok"
    revision: str = Field(description="The database's migration revision (the head).")
    workers: int | None = Field(
        default=None,
        description="With the distributed job queue: job workers seen alive recently (null "
        "when jobs run inside the API process).",
    )
