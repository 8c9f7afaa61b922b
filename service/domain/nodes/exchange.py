"""The coordinator's task exchange: tasks waiting for nodes and the nodes' answers.

A federated fit over remote contributions runs on a thread of the coordinator's API process
(the ``process`` and ``thread`` job runners run it there, whatever they do with other jobs; the
``queue`` runner is refused such a fit at submission): its protocol asks a node for one step
with :meth:`NodeExchange.ask`, which queues the task and waits; the node's agent long-polls
``GET /v1/node/tasks/next`` (:meth:`NodeExchange.next_for`) and posts the answer
(:meth:`NodeExchange.answer`). Tasks and answers live only in this process's memory: they are
public state (iterates, broadcasts) and the values the nodes send (already noised on the
node), plus each node's row count, which the protocol's calibration needs and which therefore
never reaches the coordinator's database, logs or responses.

Nothing here is durable: a coordinator that restarts loses the running job. Its recovery marks
the job failed (``job-interrupted``, every charge kept) and queues, with :meth:`NodeExchange.post`
(fire-and-forget: nobody waits for the answer, which is accepted and discarded), one ``abort``
per remote contribution of the job (:func:`service.domain.nodes.remote_fit.abort_interrupted_fit`):
a node that still holds the job's party fails it as after any abort, one whose agent restarted
refuses it and fails it too; either way its charge stays and nothing is charged twice. A node
that never polls again keeps its job accepted; aborts still queued die with the process.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["EXCHANGE", "NodeExchange", "NodeSilentError", "NodeTask"]

#: How long a node may take to answer one task before the job fails (seconds).
DEFAULT_TASK_DEADLINE: Final[float] = 60.0


class NodeSilentError(Exception):
    """A node did not answer a task within the deadline."""


@dataclass(slots=True)
class NodeTask:
    """One step asked of one node: only public state."""

    id: str
    contribution_id: str
    job_id: str
    seq: int
    step: str
    terms: Mapping[str, Any]
    vectors: list[list[float]] = field(default_factory=list)
    sizes: list[int] | None = None
    #: ``prepare`` only: the job's public plan (JSON form), which the node re-derives from
    #: the terms and the sizes and must find equal before it runs any step.
    plan: dict[str, Any] | None = None

    def to_message(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task_id": self.id,
            "contribution_id": self.contribution_id,
            "job_id": self.job_id,
            "seq": self.seq,
            "step": self.step,
            "terms": dict(self.terms),
            "vectors": self.vectors,
        }
        if self.sizes is not None:
            out["sizes"] = self.sizes
        if self.plan is not None:
            out["plan"] = self.plan
        return out


class NodeExchange:
    """Per-contribution queues of tasks, and the answers they wait for (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queues: dict[str, deque[NodeTask]] = {}
        self._open: dict[str, NodeTask] = {}
        self._answers: dict[str, dict[str, Any]] = {}
        #: Posted tasks (:meth:`post`): their answers are accepted and discarded.
        self._unawaited: set[str] = set()
        self._ids = itertools.count(1)
        self._prefix = f"{time.time_ns():x}"
        #: True once an API process serves the node task endpoints from this exchange.
        self.attached = False

    def new_task_id(self) -> str:
        return f"t{self._prefix}-{next(self._ids)}"

    def ask(self, task: NodeTask, *, deadline: float) -> dict[str, Any]:
        """Queue ``task`` and wait up to ``deadline`` seconds for the node's answer.

        Raises :class:`NodeSilentError` when none comes (the task is withdrawn from the queue)."""
        with self._cond:
            self._open[task.id] = task
            self._queues.setdefault(task.contribution_id, deque()).append(task)
            self._cond.notify_all()
            end = time.monotonic() + deadline
            while task.id not in self._answers:
                left = end - time.monotonic()
                if left <= 0:
                    self._open.pop(task.id, None)
                    queue = self._queues.get(task.contribution_id)
                    if queue is not None and task in queue:
                        queue.remove(task)
                    raise NodeSilentError(task.contribution_id)
                self._cond.wait(left)
            self._open.pop(task.id, None)
            return self._answers.pop(task.id)

    def post(self, task: NodeTask) -> None:
        """Queue ``task`` without waiting for an answer (fire-and-forget): the node's answer,
        whenever it comes, is accepted (:meth:`answer` returns True, so the agent's post of it
        succeeds) and discarded."""
        with self._cond:
            self._open[task.id] = task
            self._unawaited.add(task.id)
            self._queues.setdefault(task.contribution_id, deque()).append(task)
            self._cond.notify_all()

    def next_for(self, contribution_ids: Iterable[str], *, wait: float) -> NodeTask | None:
        """The oldest queued task for one of ``contribution_ids``, waiting up to ``wait``
        seconds for one; None when none came."""
        ids = list(contribution_ids)
        end = time.monotonic() + wait
        with self._cond:
            while True:
                for cid in ids:
                    queue = self._queues.get(cid)
                    if queue:
                        return queue.popleft()
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def answer(self, task_id: str, contribution_ids: Iterable[str], body: dict[str, Any]) -> bool:
        """Deliver a node's answer to an open task of one of its contributions; False when the
        task is unknown, no longer awaited or not addressed to this node."""
        with self._cond:
            task = self._open.get(task_id)
            if task is None or task.contribution_id not in set(contribution_ids):
                return False
            if task_id in self._unawaited:
                self._unawaited.discard(task_id)
                self._open.pop(task_id, None)
                return True
            self._answers[task_id] = body
            self._cond.notify_all()
            return True


#: The exchange of this process.
EXCHANGE = NodeExchange()
