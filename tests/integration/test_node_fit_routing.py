"""Where a coordinator's federated fit over site nodes runs, and when it is refused (issue 15).

The nodes' tasks and answers are exchanged only in the memory of the API process they poll
(``service.domain.nodes.exchange``), so a fit naming a remote contribution must run on a thread
of that process. Checked below HTTP, on SQLite, through the domain:

* the routing decision: such a fit's draft asks for the API process and goes to
  ``submit_to_api_process``; a fit over hosted datasets only, and every other job, goes to the
  runner's pool with ``submit``; after a restart, the stored job says the same
  (``needs_api_process`` with the registered rules);
* a runner that cannot run a job in the API process (the distributed queue) is refused such a
  fit, and its dry run, with a 422 that says why and what to do: nothing charged, no job row,
  nothing queued;
* with the default ``process`` runner, a recovered fit over nodes runs on a thread of this
  process (it reaches the exchange and waits for the node there) while the process pool is
  never started for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pydantic import SecretStr

from service.db.models import Dataset, new_id
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.spec import FeatureInput
from service.domain.errors import InvalidInputError
from service.domain.jobs.charged import SubmittedJob
from service.domain.jobs.lifecycle import ApiProcessScheduler, JobScheduler, needs_api_process
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units
from service.domain.nodes.exchange import EXCHANGE
from service.domain.nodes.remote import RemoteOffer, add_remote_contribution
from service.domain.nodes.remote_fit import reaches_nodes, task_deadline
from service.domain.studies.federated.request import FederatedRequest
from service.domain.studies.federated.submit import quote_federated_fit, submit_federated_fit
from service.domain.studies.membership import (
    DatasetGrant,
    StudySpecInput,
    add_contribution,
    create_study,
)
from service.runtime.runner import PoolJobRunner
from service.runtime.worker import API_PROCESS_RULES, build_runner
from service.settings import Settings
from tests.integration.test_charged_jobs import make_site

CONTEXT = AuditContext(request_id="test", client_ip=None)
SPEC = StudySpecInput(
    label_column="y",
    positive="yes",
    negative="no",
    features=[FeatureInput(column="age", type="numeric", lower=0.0, upper=100.0)],
)
ADMM: dict[str, Any] = {
    "protocol": "admm",
    "epsilon": 1.0,
    "params": {"perturbation": "dual", "iterations": 3},
}


class PoolRunner:
    """Records where each job was handed: the pool (``submit``) or the API process."""

    def __init__(self, *, sole_api_process: bool = True) -> None:
        self.pool: list[str] = []
        self.api_process: list[str] = []
        self.sole_api_process = sole_api_process

    def submit(self, job_id: str) -> None:
        self.pool.append(job_id)

    def submit_to_api_process(self, job_id: str) -> None:
        self.api_process.append(job_id)


class QueueRunner:
    """Like the distributed queue: enqueues in the charge's transaction, runs jobs in other
    processes, and cannot run one in the API process."""

    def __init__(self) -> None:
        self.enqueued: list[str] = []
        self.submitted: list[str] = []

    def enqueue_in_transaction(self, uow: UnitOfWork, job_id: str) -> None:
        del uow
        self.enqueued.append(job_id)

    def submit(self, job_id: str) -> None:
        self.submitted.append(job_id)


class Network:
    """A coordinator's study with one member's hosted, granted dataset and two remote
    contributions (datasets kept on members' nodes)."""

    def __init__(self, uow_factory: UnitOfWorkFactory) -> None:
        self.uow_factory = uow_factory
        self.coordinator, member, other = (make_site(uow_factory) for _ in range(3))
        view = create_study(
            uow_factory(),
            name="wards",
            members=[member.site_id or "", other.site_id or ""],
            spec=SPEC,
            actor=self.coordinator,
            context=CONTEXT,
        )
        self.study_id = view.study.id
        with uow_factory() as uow:
            study = uow.studies.get(self.study_id)
            assert study is not None
            self.preprocessing = dict(study.preprocessing)
            self.label = dict(study.spec["label"])
            self.feature_names = list(study.feature_names)
        self.hosted = self._granted_dataset(member, n_rows=500)
        self.second_hosted = self._granted_dataset(other, n_rows=600)
        self.remote = [
            add_remote_contribution(
                uow_factory(),
                study_id=self.study_id,
                offer=RemoteOffer(
                    node_dataset_id=new_id(),
                    preprocessing=self.preprocessing,
                    label=self.label,
                    n_features=len(self.feature_names),
                    epsilon_cap=3.0,
                    delta_cap=1e-6,
                ),
                actor=site,
                context=CONTEXT,
            ).id
            for site in (member, other)
        ]

    def _granted_dataset(self, owner: Principal, *, n_rows: int) -> str:
        """A dataset of ``owner`` encoded as the study's spec, granted to the study."""
        with self.uow_factory() as uow:
            dataset = uow.datasets.add(
                Dataset(
                    owner_site_id=owner.site_id,
                    name="hosted ward",
                    spec={"budget": {"epsilon": 4.0, "delta": 1e-6}, "label": self.label},
                    preprocessing=self.preprocessing,
                    feature_names=self.feature_names,
                    n_rows=n_rows,
                    n_features=len(self.feature_names),
                    allow_non_private=False,
                    epsilon_cap_units=to_units(4.0, EPSILON_UNIT, "down"),
                    delta_cap_units=to_units(1e-6, DELTA_UNIT, "down"),
                    epsilon_spent_units=0,
                    delta_spent_units=0,
                )
            )
            uow.commit()
        add_contribution(
            self.uow_factory(),
            study_id=self.study_id,
            actor=owner,
            context=CONTEXT,
            grant=DatasetGrant(dataset_id=dataset.id, epsilon_cap=3.0, delta_cap=1e-7),
        )
        return dataset.id

    def request(self, *datasets: str) -> FederatedRequest:
        return FederatedRequest(
            protocol=ADMM["protocol"],
            epsilon=ADMM["epsilon"],
            params=ADMM["params"],
            datasets=list(datasets),
        )

    def submit(self, runner: JobScheduler, *datasets: str) -> SubmittedJob:
        """The coordinator submits a federated fit over ``datasets`` to ``runner``."""
        return submit_federated_fit(
            self.uow_factory(),
            study_id=self.study_id,
            request=self.request(*datasets),
            actor=self.coordinator,
            runner=runner,
            context=CONTEXT,
        )

    def spent(self, dataset_id: str) -> float:
        with self.uow_factory() as uow:
            return budgets.budget_status(uow, dataset_id=dataset_id).epsilon_spent

    def jobs(self) -> int:
        with self.uow_factory() as uow:
            return uow.jobs.count(owner_site_id=self.coordinator.site_id)


@pytest.fixture
def network(uow_factory: UnitOfWorkFactory) -> Network:
    return Network(uow_factory)


def test_a_fit_over_nodes_goes_to_the_api_process_and_other_fits_to_the_pool(
    network: Network,
) -> None:
    runner = PoolRunner()
    assert isinstance(runner, ApiProcessScheduler)
    over_nodes = network.submit(runner, network.hosted, *network.remote)
    hosted_only = network.submit(runner, network.hosted, network.second_hosted)
    assert runner.api_process == [over_nodes.job.id]
    assert runner.pool == [hosted_only.job.id]
    # the hosted dataset paid for both, as usual; the nodes charge their own ledgers
    assert network.spent(network.hosted) == pytest.approx(2.0)
    # the stored jobs say the same, for a runner that resubmits them by id after a restart
    for job_id, expected in ((over_nodes.job.id, True), (hosted_only.job.id, False)):
        assert needs_api_process(network.uow_factory, job_id, rules=API_PROCESS_RULES) is expected
    assert not needs_api_process(network.uow_factory, new_id(), rules=API_PROCESS_RULES)


def test_the_rule_reads_the_remote_participants_of_a_federated_job() -> None:
    remote = {"kind": "remote", "id": "r1"}
    hosted = {"kind": "dataset", "id": "d1"}
    assert reaches_nodes({"participants": [hosted, remote]})
    assert not reaches_nodes({"participants": [hosted, hosted]})
    assert not reaches_nodes({"datasets": ["d1", "d2"]})
    assert not reaches_nodes({"participants": "r1"})
    assert not reaches_nodes({"participants": ["remote"]})
    assert set(API_PROCESS_RULES) == {"federated"}


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_runner_outside_the_api_process_is_refused_a_fit_over_nodes_before_any_charge(
    network: Network, dry_run: bool
) -> None:
    runner = QueueRunner()
    assert not isinstance(runner, ApiProcessScheduler)
    request = network.request(network.hosted, *network.remote)

    def attempt() -> object:
        if dry_run:
            return quote_federated_fit(
                network.uow_factory(),
                study_id=network.study_id,
                request=request,
                actor=network.coordinator,
                runner=runner,
            )
        return submit_federated_fit(
            network.uow_factory(),
            study_id=network.study_id,
            request=request,
            actor=network.coordinator,
            runner=runner,
            context=CONTEXT,
            idempotency_key="node-fit-on-a-queue",
        )

    with pytest.raises(InvalidInputError) as refused:
        attempt()
    detail = refused.value.detail
    assert "PRIVFIT_JOB_RUNNER=queue" in detail
    assert "PRIVFIT_JOB_RUNNER=process" in detail
    assert "Nothing was charged" in detail
    assert refused.value.errors[0]["loc"] == ["body", "datasets"]
    assert network.spent(network.hosted) == 0.0
    assert network.jobs() == 0
    assert runner.enqueued == runner.submitted == []
    # the same runner still takes fits over hosted datasets
    hosted_only = network.submit(runner, network.hosted, network.second_hosted)
    assert runner.enqueued == runner.submitted == [hosted_only.job.id]


@pytest.mark.parametrize("dry_run", [False, True])
def test_one_of_several_api_processes_is_refused_a_fit_over_nodes_before_any_charge(
    network: Network, dry_run: bool
) -> None:
    """PRIVFIT_WORKERS > 1: the nodes may poll another API process than the one that would
    run the job, so the fit is refused as with the queue (and a hosted-only fit is not)."""
    runner = PoolRunner(sole_api_process=False)
    request = network.request(network.hosted, *network.remote)
    arguments: dict[str, Any] = {
        "study_id": network.study_id,
        "request": request,
        "actor": network.coordinator,
        "runner": runner,
    }

    def attempt() -> object:
        if dry_run:
            return quote_federated_fit(network.uow_factory(), **arguments)
        return submit_federated_fit(network.uow_factory(), context=CONTEXT, **arguments)

    with pytest.raises(InvalidInputError) as refused:
        attempt()
    assert "PRIVFIT_WORKERS > 1" in refused.value.detail
    assert "Nothing was charged" in refused.value.detail
    assert network.spent(network.hosted) == 0.0
    assert network.jobs() == 0
    assert runner.api_process == runner.pool == []
    hosted_only = submit_federated_fit(
        network.uow_factory(),
        context=CONTEXT,
        **{**arguments, "request": network.request(network.hosted, network.second_hosted)},
    )
    assert runner.pool == [hosted_only.job.id]


def test_the_runner_of_several_api_processes_says_so(
    sqlite_url: str, uow_factory: UnitOfWorkFactory
) -> None:
    for workers, sole in ((1, True), (2, False)):
        settings = Settings(database_url=sqlite_url, workers=workers, job_runner="thread")
        runner = build_runner(settings, uow_factory)
        assert isinstance(runner, PoolJobRunner)
        assert runner.sole_api_process is sole


def test_a_node_fit_left_queued_is_recovered_onto_a_thread_of_the_api_process(
    network: Network, sqlite_url: str
) -> None:
    """The default process runner, after a restart: the queued fit over nodes runs on a thread
    of this process, reaches the exchange and fails only because no node answers, not
    ``nodes-unreachable`` as it would in a worker process; the process pool never starts."""
    held = PoolRunner()
    submitted = network.submit(held, *network.remote)
    assert held.api_process == [submitted.job.id]
    assert Settings.model_fields["job_runner"].default == "process"
    settings = Settings(
        database_url=sqlite_url,
        admin_key=SecretStr("k" * 40),
        environment="test",
        job_runner="process",
    )
    runner = build_runner(settings, network.uow_factory)
    assert isinstance(runner, PoolJobRunner)
    assert runner.kind == "process"
    with _attached_exchange(deadline=0.5):
        try:
            ended = threading.Event()
            assert runner.recover() == [submitted.job.id]
            # the runner calls back once its run of the job has ended (False: it already has)
            if runner.notify_when_done(submitted.job.id, lambda _: ended.set()):
                assert ended.wait(60), _job(network.uow_factory, submitted.job.id)
            job = _job(network.uow_factory, submitted.job.id)
            assert job["status"] == "failed", job
            assert runner.worker_pids() == []  # no process pool was started for it
        finally:
            runner.shutdown(wait=True)
    assert job["error"]["type"] == "node-silent", job


def _job(uow_factory: UnitOfWorkFactory, job_id: str) -> dict[str, Any]:
    with uow_factory() as uow:
        job = uow.jobs.get(job_id, fresh=True)
        assert job is not None
        return {"status": job.status, "error": job.error}


@contextmanager
def _attached_exchange(*, deadline: float) -> Iterator[None]:
    """This process as the API process serving the node endpoints, with a short deadline."""
    previous = (EXCHANGE.attached, task_deadline())
    EXCHANGE.attached = True
    task_deadline(deadline)
    try:
        yield
    finally:
        EXCHANGE.attached = previous[0]
        task_deadline(previous[1])


@pytest.fixture(autouse=True)
def _exchange_untouched() -> Iterator[None]:
    before = (EXCHANGE.attached, task_deadline())
    yield
    assert (EXCHANGE.attached, task_deadline()) == before
