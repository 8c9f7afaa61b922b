"""JSON whose text cannot reorder what a reader sees: bidi controls travel as ``\\uXXXX``.

A name chosen by a site (a dataset's, a study's) may hold Unicode bidirectional controls
(embeddings, overrides, isolates, marks). Written raw into a JSON document, they reorder the
text of whatever shows that document (a terminal, a log viewer, a browser tab): "Trojan
Source". :class:`InertJSONResponse` writes each of them as its JSON escape instead. JSON escapes
are exact, so every client still parses the very same strings; only the bytes on the wire
change.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from service.domain.access.sites import BIDI_CONTROLS

__all__ = ["InertJSONResponse", "escape_bidi_controls"]

_ESCAPES = {ord(ch): f"\\u{ord(ch):04x}" for ch in BIDI_CONTROLS}


def escape_bidi_controls(json_text: str) -> str:
    """``json_text`` with every bidi control written as its ``\\uXXXX`` escape. Exact for JSON:
    these characters can only occur inside strings, where the escape means the same."""
    return json_text.translate(_ESCAPES)


class InertJSONResponse(JSONResponse):
    """A JSON response (as FastAPI's) with bidi controls escaped."""

    def render(self, content: Any) -> bytes:
        return escape_bidi_controls(super().render(content).decode("utf-8")).encode("utf-8")
