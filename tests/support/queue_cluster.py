"""A distributed-queue deployment in real processes: ``privfit serve`` replicas and
``privfit worker`` processes (``PRIVFIT_JOB_RUNNER=queue``) on a fresh PostgreSQL database.

``fresh_database()`` creates a database on the test server (``CREATE DATABASE``, so queue
notifications of other tests' databases never mix in), migrates it (in the test process) and
drops it afterwards. :class:`Cluster` starts and stops processes on it; every process gets the
same ``PRIVFIT_*`` environment, short heartbeats and a short stalled-worker timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx2
from sqlalchemy import create_engine, make_url, text

from service.db.migrate import upgrade
from tests.support.live_server import ROOT, end_process, free_port

#: Seconds between heartbeats and after which a silent worker counts as dead, in these tests:
#: short, but with room for a worker starved of CPU on a loaded machine (a live worker taken
#: for dead would have its job failed, safely but wrongly).
HEARTBEAT_SECONDS = 1.0
STALLED_SECONDS = 12.0
#: Seconds a process may take to start (imports dominate; generous for a loaded machine).
START_TIMEOUT = 240.0


@contextmanager
def fresh_database(base_url: str) -> Iterator[str]:
    """A new PostgreSQL database next to ``base_url``'s, migrated to head; dropped afterwards."""
    name = f"privfit_queue_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(base_url).set(database=name).render_as_string(hide_password=False)
        # migrated here, as the session's SQLite template is: ``privfit migrate`` in a process
        # of its own is tested in tests/test_cli.py and tests/e2e/test_serve.py
        upgrade(url)
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _pump(stream: IO[str], sink: list[str]) -> None:
    sink.extend(iter(stream.readline, ""))


@dataclass
class Process:
    """A ``privfit`` child process and what it printed."""

    name: str
    process: subprocess.Popen[str]
    base_url: str | None = None
    output: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (running jobs finish first), then wait; what is left of the process's
        group is killed (tests.support.live_server.end_process)."""
        end_process(self.process, self.readers, timeout=timeout)

    def log(self) -> str:
        return "".join(self.output)[-4000:]


class Cluster:
    """API replicas and workers on one database (all processes stopped by :meth:`close`)."""

    def __init__(self, database_url: str, admin_key: str, extra: Mapping[str, str] | None = None):
        self.database_url = database_url
        self.admin_key = admin_key
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVFIT_")}
        env.update(
            PRIVFIT_DATABASE_URL=database_url,
            PRIVFIT_ADMIN_KEY=admin_key,
            PRIVFIT_JOB_RUNNER="queue",
            PRIVFIT_ENVIRONMENT="test",
            PRIVFIT_QUEUE_HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS),
            PRIVFIT_QUEUE_STALLED_SECONDS=str(STALLED_SECONDS),
            PRIVFIT_RATE_LIMIT_EXPENSIVE="",
            PRIVFIT_JOB_PROGRESS_INTERVAL="0.05",
            PYTHONPATH=str(ROOT),
        )
        env.update(extra or {})
        self.env = env
        self.processes: list[Process] = []

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str]) -> Process:
        popen = subprocess.Popen(
            [sys.executable, "-m", "service.cli", *argv],
            cwd=ROOT,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a group of its own, killed by stop()
        )
        process = Process(name, popen)
        assert popen.stdout is not None
        reader = threading.Thread(target=_pump, args=(popen.stdout, process.output), daemon=True)
        reader.start()
        process.readers.append(reader)
        self.processes.append(process)
        return process

    def start_api(self, name: str = "api", port: int | None = None) -> Process:
        """``privfit serve`` on a free port (or ``port``); returns once it answers."""
        port = port or free_port()
        env = {**self.env, "PRIVFIT_HOST": "127.0.0.1", "PRIVFIT_PORT": str(port)}
        process = self._spawn(name, ["serve"], env)
        process.base_url = f"http://127.0.0.1:{port}"
        # one client for every attempt (a new one builds an SSL context, ≈ 20 ms of CPU)
        with httpx2.Client(base_url=process.base_url, timeout=1) as http:
            wait_until(
                lambda: _answers(http),
                timeout=START_TIMEOUT,
                what=f"{name} to answer /healthz",
                alive=process,
            )
        return process

    def start_worker(self, name: str = "worker", concurrency: int = 1) -> Process:
        """``privfit worker --concurrency N``; returns at once (it registers on its own)."""
        return self._spawn(name, ["worker", "--concurrency", str(concurrency)], self.env)

    def close(self, log_dir: Path | None = None) -> None:
        """Stop every process; with ``log_dir``, write what each printed there."""
        for process in self.processes:
            process.stop()
        if log_dir is not None:
            for index, process in enumerate(self.processes):
                (log_dir / f"{index:02d}-{process.name}.log").write_text("".join(process.output))


def _answers(http: httpx2.Client) -> bool:
    try:
        return http.get("/healthz").status_code == 200
    except httpx2.TransportError:
        return False


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    alive: Process | None = None,
    interval: float = 0.05,
) -> Any:
    """Poll ``predicate`` (a check across processes, where no event exists) until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if alive is not None and not alive.alive():
            raise AssertionError(f"{alive.name} exited: {alive.log()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what}")
        time.sleep(interval)
