"""Structured logging: one JSON object per line, with the request id of the current request.

``configure_logging`` is called by ``privfit`` (serve, migrate, …) and handed to uvicorn, so
the server's own messages are JSON too. Never log secrets: no ``Authorization`` header, no API
key, no request body.
"""

from __future__ import annotations

import json
import logging
import logging.config
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "configure_logging", "logging_config", "request_id_var"]

#: The id of the request being handled in this context (None outside requests).
request_id_var: ContextVar[str | None] = ContextVar("privfit_request_id", default=None)

# Attributes every LogRecord has; anything else was passed via ``extra=`` and is emitted.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName", "color_message"}
)


class JsonFormatter(logging.Formatter):
    """Formats a record as a single-line JSON object."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        # Set on the record by the request middleware, else taken from the current context.
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id is not None:
            payload["request_id"] = request_id
        payload.update(
            (key, value)
            for key, value in vars(record).items()
            if key not in _STANDARD_ATTRS and not key.startswith("_")
        )
        if record.exc_info:
            payload["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


def logging_config(level: str = "INFO") -> dict[str, Any]:
    """A ``dictConfig`` sending the app's and uvicorn's logs to stderr as JSON."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            # PrivFit writes its own access log (privfit.access) with the request id.
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "alembic": {"level": level},
        },
    }


def configure_logging(level: str = "INFO") -> None:
    """Install :func:`logging_config` for this process."""
    logging.config.dictConfig(logging_config(level))
