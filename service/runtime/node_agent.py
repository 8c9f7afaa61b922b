"""``privfit agent``: the node's long-running, outbound-only task loop (issue 15).

It runs next to the node's ``privfit serve`` with the same settings (the node's database, and
``PRIVFIT_COORDINATOR_URL`` / ``PRIVFIT_COORDINATOR_KEY``): long-polls the coordinator for the
next task of this site's offers, answers it with
:func:`service.domain.nodes.node_tasks.handle_task` (which charges, checks and runs the step
on the node's own rows with noise drawn here) and posts the answer. A separate process rather
than a task of ``privfit serve``: it keeps the protocol's per-job state in one place however
many API processes the node runs, and it can be stopped or restarted on its own (a restart
makes the node refuse the rest of a running job; nothing is charged twice).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from service.db.uow import UnitOfWorkFactory
from service.domain.errors import UpstreamError
from service.domain.nodes.node_tasks import NodeState, handle_task
from service.domain.randomness import Randomness
from service.runtime.node_link import HttpCoordinatorLink
from service.settings import Settings

__all__ = ["run_agent"]

logger = logging.getLogger(__name__)

#: Seconds to wait before polling again after the coordinator could not be reached.
RETRY_SECONDS = 2.0
#: Tasks that are not steps of the protocol (not counted in the logged step time).
_BOOKKEEPING = frozenset({"join", "prepare", "finish", "abort"})


def run_agent(
    settings: Settings,
    uow_factory: UnitOfWorkFactory,
    *,
    stop: threading.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Serve tasks until ``stop`` is set (SIGTERM/SIGINT set it in the command)."""
    if not settings.coordinator_url or settings.coordinator_key is None:
        raise SystemExit("privfit agent: set PRIVFIT_COORDINATOR_URL and PRIVFIT_COORDINATOR_KEY")
    stop = stop or threading.Event()
    link = HttpCoordinatorLink(
        settings.coordinator_url, settings.coordinator_key.get_secret_value()
    )
    state = NodeState(
        randomness=Randomness.from_settings(
            environment=settings.environment, test_seed=settings.test_seed
        )
    )
    traffic: dict[str, list[float]] = {}
    logger.info("agent polling %s for tasks", settings.coordinator_url)
    if on_ready is not None:
        on_ready()
    try:
        while not stop.is_set():
            try:
                task = link.next_task(wait=settings.agent_poll_seconds)
            except UpstreamError as exc:
                logger.warning("%s; retrying", exc.detail)
                stop.wait(RETRY_SECONDS)
                continue
            if task is None:
                continue
            started = time.perf_counter()
            try:
                answer = handle_task(uow_factory, state, task)
            except Exception:
                logger.exception("task %s failed on this node", task.get("task_id"))
                answer = {"refused": "the node failed to run the step"}
            seconds = time.perf_counter() - started
            try:
                link.post_result(str(task.get("task_id")), answer)
            except UpstreamError as exc:
                logger.warning("could not post an answer: %s", exc.detail)
            _account(traffic, task, answer, seconds)
    finally:
        link.close()
    return 0


def _account(
    traffic: dict[str, list[float]],
    task: Mapping[str, Any],
    answer: Mapping[str, Any],
    seconds: float,
) -> None:
    """Count a job's tasks, JSON body bytes and the wall seconds the node spent running the
    protocol's steps (every task but join, prepare, finish and abort: the node's own local
    work, for the benchmarks); log them when the job ends here."""
    job_id = str(task.get("job_id"))
    counts = traffic.setdefault(job_id, [0, 0, 0, 0.0])
    counts[0] += 1
    counts[1] += len(json.dumps(task, separators=(",", ":")))
    counts[2] += len(json.dumps(answer, separators=(",", ":")))
    if task.get("step") not in _BOOKKEEPING:
        counts[3] += seconds
    if task.get("step") == "finish" or "refused" in answer:
        tasks, received, sent, busy = traffic.pop(job_id)
        logger.info(
            "job %s ended on this node: %d tasks, %d bytes of tasks received, %d bytes of "
            "answers sent, %.3f s running the protocol's steps",
            job_id,
            tasks,
            received,
            sent,
            busy,
        )


def install_signal_handlers(stop: threading.Event) -> None:
    """SIGTERM and SIGINT end the loop after the current task."""

    def handler(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
