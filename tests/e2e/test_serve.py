"""End to end: the container entrypoint (migrate, then `privfit serve`) on a real port.

This is the same start command the Docker image runs, exercised without Docker: a fresh SQLite
database, the admin key printed once at the first start, sites and key rotation over HTTP,
JSON logs without secrets, and a restart that prints nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx2
import pytest

from tests.support.live_server import end_process

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
KEY_LINE = re.compile(r"^\s+(pf_[a-z0-9]{8}_[A-Za-z0-9_-]{43})$", re.MULTILINE)

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    process: subprocess.Popen[str]
    base_url: str
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def wait_until_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        # one client for every attempt (a new one builds an SSL context, ≈ 20 ms of CPU)
        with httpx2.Client(base_url=self.base_url, timeout=1) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise AssertionError(f"server exited: {''.join(self.stderr)[-2000:]}")
                try:
                    if http.get("/healthz").status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                time.sleep(0.1)
        raise AssertionError("server did not become healthy")

    def stop(self) -> None:
        end_process(self.process, self.readers)


def _pump(stream: IO[str], sink: list[str]) -> None:
    sink.extend(iter(stream.readline, ""))


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    scripts = Path(sys.executable).parent
    assert shutil.which("privfit", path=str(scripts)), "the privfit console script is installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVFIT_")}
    env.update(
        PATH=f"{scripts}{os.pathsep}{env.get('PATH', '')}",
        PRIVFIT_DATABASE_URL=f"sqlite:///{tmp_path / 'data' / 'privfit.db'}",
        PRIVFIT_HOST="127.0.0.1",
        PRIVFIT_PORT=str(free_port()),
        # These tests run no job: the thread runner spares each start the default process
        # pool's warm worker (an interpreter importing the service, ≈ 2.5 s of CPU) that they
        # would never use (the live servers of tests/client and tests/e2e run their jobs on it).
        PRIVFIT_JOB_RUNNER="thread",
    )
    return env


@pytest.fixture
def start(environment: dict[str, str], tmp_path: Path) -> Iterator[Callable[[], Server]]:
    servers: list[Server] = []

    def _start() -> Server:
        process = subprocess.Popen(
            ["sh", str(ENTRYPOINT)],
            cwd=tmp_path,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its group is killed with it (end_process)
        )
        server = Server(process, f"http://127.0.0.1:{environment['PRIVFIT_PORT']}")
        for stream, sink in ((process.stdout, server.stdout), (process.stderr, server.stderr)):
            reader = threading.Thread(target=_pump, args=(stream, sink), daemon=True)
            reader.start()
            server.readers.append(reader)
        servers.append(server)
        server.wait_until_healthy()
        return server

    yield _start
    for server in servers:
        server.stop()


def test_entrypoint_migrates_serves_and_prints_the_admin_key_once(
    start: Callable[[], Server],
) -> None:
    server = start()
    base = server.base_url
    assert httpx2.get(f"{base}/readyz").status_code == 200

    deadline = time.monotonic() + 10
    while not KEY_LINE.search("".join(server.stdout)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (admin_key,) = KEY_LINE.findall("".join(server.stdout))
    admin = {"Authorization": f"Bearer {admin_key}"}

    created = httpx2.post(f"{base}/v1/sites", json={"name": "Clinic"}, headers=admin)
    assert created.status_code == 201
    site_key = created.json()["key"]["api_key"]
    site = {"Authorization": f"Bearer {site_key}"}
    assert httpx2.get(f"{base}/v1/sites/me", headers=site).json()["name"] == "Clinic"

    rotated = httpx2.post(f"{base}/v1/sites/me/keys/rotate", headers=site)
    assert rotated.status_code == 200
    assert httpx2.get(f"{base}/v1/sites/me", headers=site).status_code == 401
    new_site = {"Authorization": f"Bearer {rotated.json()['api_key']}"}
    assert httpx2.get(f"{base}/v1/sites/me", headers=new_site).status_code == 200
    assert "privfit_http_requests_total" in httpx2.get(f"{base}/metrics").text
    assert httpx2.get(f"{base}/docs").status_code == 200

    server.stop()
    logs = "".join(server.stderr)
    for secret in (admin_key, site_key, rotated.json()["api_key"]):
        assert secret not in logs
    records = [json.loads(line) for line in logs.splitlines() if line.strip()]
    access = [r for r in records if r["logger"] == "privfit.access"]
    assert access
    assert all(r["request_id"] for r in access)
    assert {r["logger"] for r in records} & {"uvicorn.error", "privfit"}

    again = start()
    assert KEY_LINE.findall("".join(again.stdout)) == []
    assert httpx2.get(f"{again.base_url}/v1/sites", headers=admin).status_code == 200
