"""Fair use of the job slots between sites (issue 26 §4): which queued job starts next.

Pure and deterministic: no clock, no I/O. The in-process pool
(:class:`service.runtime.runner.PoolJobRunner`) and the distributed queue's claim
(:func:`service.db.queue.queue_app`, ``fair_claim``) apply the same two rules:

1. **Share cap.** A site holding c(slots) = max(1, ⌊share·slots⌋) running jobs starts no
   other until one of them ends, even while slots are free: those slots are kept for other
   sites, so a site that submits later starts at once instead of waiting for a long job to
   end (nothing is pre-empted). ``share = 1`` turns the reservation off.
2. **Round-robin between sites.** Each queued job carries a start tag (start-time fair
   queueing with unit cost per job): S = max(V, S_prev + 1), V the tag of the job started
   last and S_prev the tag of the site's previous job still queued or running (none: S = V).
   The eligible job with the smallest tag starts first, ties in arrival order. With several
   sites backlogged they take turns, one job each; a site's own jobs keep their order; a
   site that arrives late starts at the current V, so it neither waits behind another
   site's whole backlog nor starves one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Waiting", "choose_next", "site_cap", "start_tag"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """A queued job as the scheduler sees it: its owner site and its start tag."""

    site: str
    tag: int


def site_cap(slots: int, share: float) -> int:
    """Most slots one site may hold at once: max(1, ⌊share·slots⌋) (never above ``slots``)."""
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share must lie in (0, 1], got {share}")
    # the 1e-9 keeps e.g. 0.3·10 = 2.9999999999999996 at 3
    return max(1, min(slots, math.floor(share * slots + 1e-9)))


def start_tag(virtual_time: int, previous: int | None) -> int:
    """A new job's start tag: max(V, S_prev + 1), or V when the site has no job queued or
    running (``previous`` None)."""
    return virtual_time if previous is None else max(virtual_time, previous + 1)


def choose_next(
    waiting: Sequence[Waiting], running: Mapping[str, int], *, slots: int, share: float
) -> int | None:
    """The index in ``waiting`` (arrival order) of the job to start now, or None: when every
    slot is taken (Σ running ≥ ``slots``) or every site with queued jobs already holds its
    cap c = max(1, ⌊share·slots⌋). Otherwise the smallest start tag among the jobs of sites
    holding fewer than c slots, the earliest arrival on a tie."""
    if sum(running.values()) >= slots:
        return None
    cap = site_cap(slots, share)
    best: int | None = None
    for index, job in enumerate(waiting):
        if running.get(job.site, 0) >= cap:
            continue
        if best is None or job.tag < waiting[best].tag:
            best = index
    return best
