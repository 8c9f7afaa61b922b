"""Large request bodies sent over a raw socket, and ``/healthz`` latency meanwhile (issue 26 §2).

:func:`post_large_body` sends the request head, then streams a JSON body of ``size`` bytes on
a thread of its own while the caller waits for the first byte of the answer: the time from
the end of the head to that byte is how long the server took to decide (it is not the time
to send the body, which the server may never read). :class:`HealthProbe` polls ``/healthz``
on one keep-alive connection meanwhile. Used by ``tests/api/test_request_limits_live.py`` and
``benchmarks/bench_request_limits.py``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx2

CHUNK = 1 << 20


@dataclass(frozen=True)
class Answer:
    """The status of the answer and the seconds from the end of the request head to it."""

    status: int
    seconds: float


def json_body(size: int) -> Iterator[bytes]:
    """``size`` bytes (at least 76) of a fit request whose ``params`` hold one long list, in
    pieces of up to :data:`CHUNK` bytes (valid JSON when sent whole)."""
    head = b'{"mechanism": "objective_perturbation", "epsilon": 1, "params": {"x": ['
    tail = b"1]}}"
    filler = b"1," * (CHUNK // 2)
    yield head
    sent = len(head) + len(tail)
    while sent + len(filler) <= size:
        yield filler
        sent += len(filler)
    rest = max(0, size - sent)
    yield filler[: rest // 2 * 2] + b" " * (rest % 2)  # exactly ``size`` bytes in all
    yield tail


def _send_body(sock: socket.socket, size: int, chunked: bool) -> None:
    try:
        for piece in json_body(size):
            if not piece:
                continue
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the server answered and closed without reading the rest: what it should do


def post_large_body(
    base_url: str,
    path: str,
    *,
    size: int,
    chunked: bool = False,
    headers: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> Answer:
    """POST ``size`` bytes of JSON to ``path`` (``Content-Length`` declared, or chunked)."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Content-Type: application/json",
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(head)
        started = time.perf_counter()
        sender = threading.Thread(target=_send_body, args=(sock, size, chunked), daemon=True)
        sender.start()
        first = sock.recv(65536)
        seconds = time.perf_counter() - started
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    sender.join(timeout=timeout)
    if not first.startswith(b"HTTP/1.1 "):
        raise AssertionError(f"no HTTP answer: {first[:80]!r}")
    return Answer(int(first.split(b" ", 2)[1]), seconds)


@dataclass
class HealthProbe:
    """Polls ``/healthz`` on a thread until stopped; :meth:`quantile` of the latencies."""

    base_url: str
    latencies: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HealthProbe:
        """Start polling; returns once the first answer came (the connection is open)."""
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.latencies and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)
        self.latencies.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        with httpx2.Client(base_url=self.base_url, timeout=60) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                response = client.get("/healthz")
                self.latencies.append(time.perf_counter() - started)
                assert response.status_code == 200
                self._stop.wait(0.005)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0–1) of the latencies, in seconds; 0 without any (no poll was
        in flight for long: one still in flight when the probe stops is waited for)."""
        ordered = sorted(self.latencies)
        if len(ordered) < 2:
            return ordered[0] if ordered else 0.0
        return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


def access_log_durations(stderr_lines: list[str], route: str) -> list[tuple[int, float]]:
    """(status, server milliseconds) of the access-log lines of ``route`` (a path template)."""
    found = []
    for line in stderr_lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("route") == route and "duration_ms" in record:
            found.append((int(record["status"]), float(record["duration_ms"])))
    return found
