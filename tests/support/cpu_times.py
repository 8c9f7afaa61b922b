"""A pytest plugin measuring each test's CPU time, for keeping the default tier small.

``PRIVFIT_TEST_CPU_LOG=cpu.tsv pytest -p tests.support.cpu_times ...`` appends one line per
test phase to ``cpu.tsv``: node id, phase (setup, call, teardown), CPU seconds (user + sys of
the test process and of the children it waited for, from ``getrusage``) and wall seconds. Each
xdist worker appends its own lines. Wall time on a shared machine says little; CPU time is
what the tier costs (a live server's CPU is counted once the test has waited for its exit).
Sum a file with ``python -m tests.support.cpu_times cpu.tsv``.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_LOG_ENV = "PRIVFIT_TEST_CPU_LOG"


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _record(nodeid: str, phase: str, cpu: float, wall: float) -> None:
    path = os.environ.get(_LOG_ENV)
    if path:
        with Path(path).open("a", encoding="utf-8") as log:
            log.write(f"{nodeid}\t{phase}\t{cpu:.3f}\t{wall:.3f}\n")


@contextmanager
def _timed(nodeid: str, phase: str) -> Iterator[None]:
    """Log the CPU and wall seconds of the block, also when it raises."""
    cpu, wall = _cpu_seconds(), time.perf_counter()
    try:
        yield
    finally:
        _record(nodeid, phase, _cpu_seconds() - cpu, time.perf_counter() - wall)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Time the set-up of ``item``."""
    with _timed(item.nodeid, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Time the call of ``item``."""
    with _timed(item.nodeid, "call"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """Time the teardown of ``item``."""
    with _timed(item.nodeid, "teardown"):
        return (yield)


def summarise(path: Path, top: int = 40) -> str:
    """Totals per folder and the ``top`` tests by CPU, from a log written by this plugin."""
    per_test: dict[str, float] = defaultdict(float)
    for line in path.read_text(encoding="utf-8").splitlines():
        nodeid, _, seconds, _ = line.split("\t")
        per_test[nodeid] += float(seconds)
    per_folder: dict[str, float] = defaultdict(float)
    for nodeid, cpu in per_test.items():
        parts = nodeid.split("::")[0].split("/")
        per_folder["/".join(parts[:3] if parts[1] == "unit" else parts[:2])] += cpu
    lines = [f"{len(per_test)} tests, {sum(per_test.values()):.1f} s of CPU"]
    lines += [f"{cpu:8.1f}  {folder}" for folder, cpu in sorted(per_folder.items())]
    lines.append("")
    ranked = sorted(per_test.items(), key=lambda entry: -entry[1])[:top]
    lines += [f"{cpu:8.2f}  {nodeid}" for nodeid, cpu in ranked]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40))
