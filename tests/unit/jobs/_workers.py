"""Job functions for the runner tests; importable by spawned worker processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from service.runtime.runner import JobFunction


def file_worker(directory: str) -> JobFunction:
    """A job writes ``<id>.started`` then ``<id>.done`` with its process id into ``directory``.

    Job ids starting with ``sleep`` wait in between (at most 30 s) until a file ``release``
    appears in ``directory``; ids starting with ``fail`` raise after starting. A job that
    ends returns ``"<id> done"``.
    """
    root = Path(directory)

    def mark(name: str) -> None:
        # Written aside and renamed, so a reader never sees the file before its content.
        part = root / f"{name}.part"
        part.write_text(str(os.getpid()))
        part.replace(root / name)

    def run(job_id: str) -> str:
        mark(f"{job_id}.started")
        if job_id.startswith("sleep"):
            deadline = time.monotonic() + 30.0
            while not (root / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        if job_id.startswith("fail"):
            raise RuntimeError("job failed on purpose")
        mark(f"{job_id}.done")
        return f"{job_id} done"

    return run
