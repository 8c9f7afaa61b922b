"""``Accept`` negotiation (RFC 9110 §12.5.1) for operations that answer in several media types.

Each offered type gets the q-value of the most specific media range that matches it (``a/b``
over ``a/*`` over ``*/*``; no match is q = 0). The highest q wins; on a tie a type the client
named explicitly beats one matched by a wildcard, then the server's order of preference. No
``Accept`` header, or nothing acceptable, gives the first offered type (the default).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["choose_media_type"]


def _ranges(accept: str) -> list[tuple[str, float]]:
    out = []
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if "/" not in media:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = min(max(float(value), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        out.append((media.lower(), q))
    return out


def _match(offer: str, ranges: list[tuple[str, float]]) -> tuple[float, int]:
    """(q, specificity) of the most specific range matching ``offer``; specificity 2 exact,
    1 ``type/*``, 0 ``*/*``, −1 no match."""
    kind = offer.split("/")[0]
    best = (0.0, -1)
    for media, q in ranges:
        if media not in (offer, f"{kind}/*", "*/*"):
            continue
        specificity = 2 if media == offer else 1 if media == f"{kind}/*" else 0
        if specificity > best[1]:
            best = (q, specificity)
    return best


def choose_media_type(accept: str | None, offers: Sequence[str]) -> str:
    """The offered media type ``accept`` prefers (``offers`` in the server's preference order)."""
    if not accept or not accept.strip():
        return offers[0]
    ranges = _ranges(accept)
    scored = []
    for rank, offer in enumerate(offers):
        q, specificity = _match(offer, ranges)
        if q > 0:
            scored.append((-q, -int(specificity == 2), rank, offer))
    return min(scored)[3] if scored else offers[0]
