"""A real PrivFit server in a child process (``privfit migrate`` then ``privfit serve``).

Tests of the client, the command line, the README walkthrough and the pages people use (in a
headless browser) talk to a server over a real socket, as site software does. ``start_server``
starts one on a free loopback port with its own database (SQLite file by default, or a
PostgreSQL schema URL) and a known admin key, and waits until ``/readyz`` answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx2

from tests.support.snapshots import copy_sqlite

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LiveServer:
    """A running ``privfit serve`` process and what it printed."""

    process: subprocess.Popen[str]
    base_url: str
    admin_key: str
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Ask ``/readyz`` every 50 ms until it answers 200 (or the process exits).

        One client for every attempt: each new ``httpx2`` client builds an SSL context
        (≈ 20 ms of CPU), and a server starting on a busy machine is asked hundreds of times,
        which cost the test process seconds of CPU per server."""
        deadline = time.monotonic() + timeout
        with httpx2.Client(base_url=self.base_url, timeout=1) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise AssertionError(f"server exited: {''.join(self.stderr)[-3000:]}")
                try:
                    if http.get("/readyz").status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                time.sleep(0.05)
        raise AssertionError("server did not become ready")

    def stop(self) -> None:
        end_process(self.process, self.readers)


def end_process(
    process: subprocess.Popen[str], readers: list[threading.Thread], timeout: float = 15.0
) -> None:
    """SIGTERM ``process`` (started with ``start_new_session=True``, so that it leads a process
    group of its own), SIGKILL after ``timeout`` seconds, then SIGKILL what is left of its group.

    A server's job pool workers and multiprocessing's resource tracker are its children and
    hold its output pipes: one that outlived it (its parent killed, or itself stuck) kept the
    readers from ever seeing the end of the output, and closing a stream whose reader was
    still blocked in it blocked the test process for good (the reader holds the stream's
    lock). The group is killed, and a stream is closed only once its readers are done."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for reader in readers:
        reader.join(timeout=5)
    if any(reader.is_alive() for reader in readers):
        return  # left to the daemon threads; never close a stream a thread is reading
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _pump(stream: IO[str], sink: list[str]) -> None:
    sink.extend(iter(stream.readline, ""))


def server_environment(
    database_url: str, *, admin_key: str, port: int, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a server process: no inherited ``PRIVFIT_*`` setting leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVFIT_")}
    env.update(
        PRIVFIT_DATABASE_URL=database_url,
        PRIVFIT_ADMIN_KEY=admin_key,
        PRIVFIT_HOST="127.0.0.1",
        PRIVFIT_PORT=str(port),
    )
    env.update(extra or {})
    return env


@contextmanager
def start_server(
    database_url: str,
    *,
    admin_key: str,
    workdir: Path,
    extra_env: Mapping[str, str] | None = None,
    ready_timeout: float = 60.0,
    migrated: Path | None = None,
    migrate: bool = True,
) -> Iterator[LiveServer]:
    """Migrate ``database_url`` and serve it on a free port until the block ends (failing if
    ``/readyz`` does not answer within ``ready_timeout`` seconds).

    ``migrated``: a SQLite file already migrated to head (the session's ``sqlite_template``),
    copied to ``database_url``'s file instead of running ``privfit migrate``, which starts an
    interpreter and imports the service (seconds of CPU per server; ``privfit migrate`` itself
    is tested in tests/test_cli.py and tests/e2e/test_serve.py). ``migrate=False``: the
    database is already at head (a ``postgres_url`` schema), so no migration runs."""
    port = free_port()
    env = server_environment(database_url, admin_key=admin_key, port=port, extra=extra_env)
    if migrated is not None:
        assert database_url.startswith("sqlite:///"), database_url
        copy_sqlite(migrated, Path(database_url.removeprefix("sqlite:///")))
    elif migrate:
        subprocess.run(
            [sys.executable, "-m", "service.cli", "migrate"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve"],
        cwd=workdir,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its group is killed with it (end_process)
    )
    server = LiveServer(process, f"http://127.0.0.1:{port}", admin_key)
    for stream, sink in ((process.stdout, server.stdout), (process.stderr, server.stderr)):
        reader = threading.Thread(target=_pump, args=(stream, sink), daemon=True)
        reader.start()
        server.readers.append(reader)
    try:
        server.wait_until_ready(ready_timeout)
        yield server
    finally:
        server.stop()
