"""PoolJobRunner: jobs run off the API thread, lost jobs are reported, shutdown is clean; a job
that needs the API process (a federated fit over site nodes) runs on one of its threads whatever
the pool, and is tracked, recovered and shut down like the others."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.domain.jobs.lifecycle import ApiProcessScheduler
from service.runtime.runner import (
    JobRunner,
    PlacementFunction,
    PoolJobRunner,
    RunnerKind,
    SiteFunction,
)
from tests.unit.jobs._workers import file_worker

TIMEOUT = 30.0


def wait_for(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def spy_on_submissions(runner: PoolJobRunner) -> list[str]:
    """The ids ``runner`` is given from now on, through either of its submit methods (the
    runner resubmits a lost job through them)."""
    seen: list[str] = []
    for name in ("submit", "submit_to_api_process"):
        original = getattr(runner, name)

        def spy(job_id: str, original: Callable[[str], None] = original) -> None:
            seen.append(job_id)
            original(job_id)

        setattr(runner, name, spy)
    return seen


class Recorder:
    """The domain side of the runner: records lost jobs; resubmits the ones named so."""

    def __init__(self, resubmit: set[str] | None = None, recover: list[str] | None = None):
        self.lost: list[str] = []
        self.resubmit = resubmit or set()
        self.to_recover = recover or []
        self.lock = threading.Lock()

    def on_lost(self, job_id: str) -> bool:
        with self.lock:
            self.lost.append(job_id)
        return job_id in self.resubmit

    def recover(self) -> list[str]:
        return list(self.to_recover)


@pytest.fixture
def make_runner(tmp_path: Path) -> Iterator[Callable[..., PoolJobRunner]]:
    runners: list[PoolJobRunner] = []

    def make(
        kind: RunnerKind,
        recorder: Recorder,
        workers: int = 1,
        *,
        needs_api_process: PlacementFunction | None = None,
        site_of: SiteFunction | None = None,
        max_site_share: float = 1.0,
    ) -> PoolJobRunner:
        runner = PoolJobRunner(
            worker=functools.partial(file_worker, str(tmp_path)),
            recover_jobs=recorder.recover,
            on_lost=recorder.on_lost,
            workers=workers,
            kind=kind,
            needs_api_process=needs_api_process,
            site_of=site_of,
            max_site_share=max_site_share,
        )
        runners.append(runner)
        return runner

    yield make
    (tmp_path / "release").touch()
    for runner in runners:
        runner.shutdown(wait=False)


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_jobs_run_in_the_pool(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path, kind: RunnerKind
) -> None:
    runner = make_runner(kind, Recorder(), workers=2)
    assert isinstance(runner, JobRunner)
    runner.start()
    for i in range(4):
        runner.submit(f"job{i}")
    wait_for(lambda: all((tmp_path / f"job{i}.done").exists() for i in range(4)))
    pids = {int((tmp_path / f"job{i}.done").read_text()) for i in range(4)}
    if kind == "process":
        assert os.getpid() not in pids
        assert 1 <= len(pids) <= 2
    else:
        assert pids == {os.getpid()}
    wait_for(lambda: runner.active == 0)


def test_a_raising_job_is_reported_lost_and_not_resubmitted(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    recorder = Recorder(resubmit={"fail-1"})
    runner = make_runner("thread", recorder)
    runner.start()
    resubmitted = spy_on_submissions(runner)
    runner.submit("fail-1")
    wait_for(lambda: recorder.lost == ["fail-1"])
    runner.shutdown(wait=True)  # the worker thread, where the job was settled, has ended
    assert recorder.lost == ["fail-1"]  # only a dead worker leads to a resubmission
    assert resubmitted == ["fail-1"]  # the test's own submission, nothing after it


def test_a_killed_worker_process_reports_its_jobs_and_the_pool_recovers(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    recorder = Recorder(resubmit={"sleep-bystander"})
    runner = make_runner("process", recorder, workers=2)
    runner.start()
    runner.submit("sleep-victim")
    runner.submit("sleep-bystander")
    runner.submit("queued-behind")  # waits in the runner for a free slot
    wait_for(lambda: (tmp_path / "sleep-victim.started").exists())
    wait_for(lambda: (tmp_path / "sleep-bystander.started").exists())
    pid = int((tmp_path / "sleep-victim.started").read_text())
    assert pid in runner.worker_pids()
    assert not (tmp_path / "queued-behind.started").exists()
    os.kill(pid, signal.SIGKILL)
    # the broken pool loses both of its jobs; the domain has the bystander resubmitted
    wait_for(lambda: sorted(recorder.lost) == ["sleep-bystander", "sleep-victim"])
    # the job that was waiting for a slot never reached the broken pool: it runs on the
    # fresh one without being lost
    wait_for(lambda: (tmp_path / "queued-behind.done").exists())
    assert int((tmp_path / "queued-behind.done").read_text()) != pid
    (tmp_path / "release").touch()
    wait_for(lambda: (tmp_path / "sleep-bystander.done").exists())
    assert int((tmp_path / "sleep-bystander.done").read_text()) != pid
    assert not (tmp_path / "sleep-victim.done").exists()
    runner.submit("after")
    wait_for(lambda: (tmp_path / "after.done").exists())
    assert sorted(recorder.lost) == ["sleep-bystander", "sleep-victim"]


def test_recover_resubmits_what_the_domain_returns(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    runner = make_runner("thread", Recorder(recover=["r1", "r2"]))
    runner.start()
    assert runner.recover() == ["r1", "r2"]
    wait_for(lambda: (tmp_path / "r1.done").exists() and (tmp_path / "r2.done").exists())


def test_shutdown_drops_unstarted_jobs_without_reporting_them(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    recorder = Recorder()
    runner = make_runner("thread", recorder)
    runner.start()
    runner.submit("sleep-running")
    runner.submit("never-started")
    wait_for(lambda: (tmp_path / "sleep-running.started").exists())
    runner.shutdown(wait=False)
    # it returned while the running job still waits for the release file (up to 30 s)
    assert not (tmp_path / "sleep-running.done").exists()
    assert not (tmp_path / "never-started.started").exists()
    assert recorder.lost == []
    with pytest.raises(RuntimeError, match="shut down"):
        runner.submit("late")


def test_invalid_configuration_is_refused() -> None:
    recorder = Recorder()
    with pytest.raises(ValueError, match="workers"):
        PoolJobRunner(
            worker=functools.partial(file_worker, "."),
            recover_jobs=recorder.recover,
            on_lost=recorder.on_lost,
            workers=0,
        )


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_listener_hears_when_the_runner_is_done_with_a_job(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path, kind: RunnerKind
) -> None:
    runner = make_runner(kind, Recorder())
    runner.start()
    heard: list[str] = []
    returned: dict[str, object] = {}

    def listener(job_id: str) -> Callable[[object], None]:
        def hear(value: object) -> None:
            returned[job_id] = value
            heard.append(job_id)

        return hear

    assert not runner.notify_when_done("sleep-1", listener("early"))  # not submitted
    runner.submit("sleep-1")
    runner.submit("fail-2")
    assert runner.notify_when_done("sleep-1", listener("sleep-1"))
    assert runner.notify_when_done("fail-2", listener("fail-2"))
    wait_for(lambda: (tmp_path / "sleep-1.started").exists())
    assert heard == []  # the first job runs and waits for the release file
    (tmp_path / "release").touch()
    wait_for(lambda: sorted(heard) == ["fail-2", "sleep-1"])  # a failure ends the wait too
    assert (tmp_path / "sleep-1.done").exists()
    # what the job function returned reaches the listener (across processes too); nothing
    # for a job that raised
    assert returned == {"sleep-1": "sleep-1 done", "fail-2": None}
    assert not runner.notify_when_done("sleep-1", listener("late"))


# --- jobs that need the API process --------------------------------------------------------


def _pid(tmp_path: Path, job_id: str) -> int:
    return int((tmp_path / f"{job_id}.done").read_text())


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_job_that_needs_the_api_process_runs_on_one_of_its_threads(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path, kind: RunnerKind
) -> None:
    runner = make_runner(kind, Recorder())
    assert isinstance(runner, ApiProcessScheduler)
    runner.start()
    runner.submit_to_api_process("api-1")
    runner.submit("pool-1")
    wait_for(lambda: (tmp_path / "api-1.done").exists() and (tmp_path / "pool-1.done").exists())
    assert _pid(tmp_path, "api-1") == os.getpid()
    if kind == "process":
        assert _pid(tmp_path, "pool-1") != os.getpid()
        assert _pid(tmp_path, "pool-1") in runner.worker_pids()
    else:
        assert _pid(tmp_path, "pool-1") == os.getpid()
    wait_for(lambda: runner.active == 0)


def test_recovery_sends_each_job_where_the_domain_says_it_runs(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    runner = make_runner(
        "process",
        Recorder(recover=["api-r1", "pool-r2"]),
        needs_api_process=lambda job_id: job_id.startswith("api"),
    )
    runner.start()
    assert runner.recover() == ["api-r1", "pool-r2"]
    wait_for(lambda: (tmp_path / "api-r1.done").exists() and (tmp_path / "pool-r2.done").exists())
    assert _pid(tmp_path, "api-r1") == os.getpid()
    assert _pid(tmp_path, "pool-r2") != os.getpid()


def test_an_api_process_job_is_heard_and_reported_lost_like_a_pool_job(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    recorder = Recorder(resubmit={"fail-api"})
    runner = make_runner("process", recorder)
    runner.start()
    heard: dict[str, object] = {}
    resubmitted = spy_on_submissions(runner)
    runner.submit_to_api_process("sleep-api")
    runner.submit_to_api_process("fail-api")
    assert runner.notify_when_done("sleep-api", lambda value: heard.update({"sleep-api": value}))
    wait_for(lambda: (tmp_path / "sleep-api.started").exists())
    assert runner.active == 2
    assert heard == {}
    (tmp_path / "release").touch()
    wait_for(lambda: recorder.lost == ["fail-api"])
    wait_for(lambda: heard == {"sleep-api": "sleep-api done"})
    runner.shutdown(wait=True)  # the API-process threads, where the jobs were settled, ended
    assert recorder.lost == ["fail-api"]  # a raising job is settled, never resubmitted
    assert resubmitted == ["sleep-api", "fail-api"]  # the test's own submissions only
    assert _pid(tmp_path, "sleep-api") == os.getpid()


def test_shutdown_drops_unstarted_api_process_jobs_and_waits_for_running_ones(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    recorder = Recorder()
    runner = make_runner("process", recorder)
    runner.start()
    runner.submit_to_api_process("sleep-api")
    runner.submit_to_api_process("never-started")  # one API thread: waits behind it
    wait_for(lambda: (tmp_path / "sleep-api.started").exists())
    release = threading.Timer(0.5, (tmp_path / "release").touch)
    release.start()
    try:
        runner.shutdown(wait=True)
    finally:
        release.cancel()
    # the running job finished before shutdown returned; the queued one never started (it
    # stays queued in the database for the next start's recovery) and is not reported lost
    assert (tmp_path / "sleep-api.done").exists()
    assert not (tmp_path / "never-started.started").exists()
    assert recorder.lost == []
    with pytest.raises(RuntimeError, match="shut down"):
        runner.submit_to_api_process("late")


def site_of_job(job_id: str) -> str:
    """The tests' jobs name their site after the first dash: ``sleep-A-1`` is site A's."""
    return job_id.split("-")[1]


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_another_sites_job_starts_while_one_site_fills_the_queue(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path, kind: RunnerKind
) -> None:
    """Two slots, share ½: site A's three long jobs hold one slot; site B's job, submitted
    after them, runs at once on the other (without fairness it waits for a long job)."""
    runner = make_runner(kind, Recorder(), workers=2, site_of=site_of_job, max_site_share=0.5)
    runner.start()
    for index in (1, 2, 3):
        runner.submit(f"sleep-A-{index}")
    wait_for(lambda: (tmp_path / "sleep-A-1.started").exists())
    assert runner.waiting_sites() == ["A", "A"]
    heard = threading.Event()
    runner.submit("quick-B-1")
    assert runner.notify_when_done("sleep-A-3", lambda _: heard.set())  # waiting: still known
    wait_for(lambda: (tmp_path / "quick-B-1.done").exists())
    # B's job wrote its file just before the runner saw it end: wait for that, not a moment
    wait_for(lambda: runner.active == 3)  # A-1 running, A-2 and A-3 waiting for A's slot
    assert not (tmp_path / "sleep-A-2.started").exists()
    assert runner.waiting_sites() == ["A", "A"]
    (tmp_path / "release").touch()
    for index in (1, 2, 3):
        wait_for(lambda index=index: (tmp_path / f"sleep-A-{index}.done").exists())  # type: ignore[misc]
    assert heard.wait(TIMEOUT)
    wait_for(lambda: runner.active == 0)


def test_sites_take_turns_for_one_slot() -> None:
    """One slot: behind a running job, A's backlog of two and B's of two start B, A, B, A."""
    gate = threading.Event()
    started: list[str] = []

    def job(job_id: str) -> None:
        started.append(job_id)
        if job_id == "A-0":
            gate.wait(TIMEOUT)

    runner = PoolJobRunner(
        worker=lambda: job,
        recover_jobs=list,
        on_lost=lambda _: False,
        kind="thread",
        site_of=lambda job_id: job_id[0],
    )
    runner.start()
    try:
        runner.submit("A-0")  # holds the slot while the others queue
        wait_for(lambda: started == ["A-0"])
        for job_id in ("A-1", "A-2", "B-1", "B-2"):
            runner.submit(job_id)
        assert runner.waiting_sites() == ["A", "A", "B", "B"]
        gate.set()
        wait_for(lambda: runner.active == 0)
        assert started == ["A-0", "B-1", "A-1", "B-2", "A-2"]
    finally:
        runner.shutdown()


def test_shutdown_drops_jobs_waiting_for_a_slot_and_tells_their_listeners(
    make_runner: Callable[..., PoolJobRunner], tmp_path: Path
) -> None:
    runner = make_runner("thread", Recorder(), workers=1, site_of=site_of_job)
    runner.start()
    runner.submit("sleep-A-1")
    runner.submit("quick-A-2")
    heard: list[object] = ["not called"]
    assert runner.notify_when_done("quick-A-2", lambda returned: heard.__setitem__(0, returned))
    # told after the runner has handed out the slot sleep-A-1 frees (or found it shut down)
    settled = threading.Event()
    assert runner.notify_when_done("sleep-A-1", lambda _: settled.set())
    runner.shutdown(wait=False)
    assert heard == [None]
    (tmp_path / "release").touch()
    assert settled.wait(TIMEOUT)
    assert runner.active == 0  # the freed slot went to no job
    assert not (tmp_path / "quick-A-2.started").exists()
