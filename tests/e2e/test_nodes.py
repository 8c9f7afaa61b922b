"""Site nodes (issue 15) with real processes on loopback, nothing mocked.

A coordinator (``privfit serve``, SQLite, the default ``process`` job runner, as ``make run``
starts it) and three nodes, each its own ``privfit serve`` with its own SQLite database and its
own ``privfit agent``. Every node uploads a dataset and offers it to the coordinator's study;
the coordinator runs federated fits over the three remote contributions (the heavy tier).
The default tier's smoke runs a psgd fit over a leaner network (:func:`pair`): a coordinator
process on the thread runner and two nodes, each a real ``privfit agent`` process whose API
(upload, offer, budget) runs in the test process on the node's own database. Checked:

* the coordinator's job runner is a pool of worker processes, yet its fits over nodes run (on a
  thread of its API process, where the nodes' task exchange lives);

* psgd, admm (dual and primal) and the DP distributed Lasso release exactly (1e-9) the model
  of the in-process federated fit over the same rows with the same job seed (test mode);
* the coordinator's database file, its logs and every response it gave contain none of the
  nodes' distinctive values and none of their row counts;
* each node charged its own ledger once per job and recorded it in its audit log;
* a task outside the offer's caps is refused and the job fails with the node's reason;
* a forged or replayed task from a compromised coordinator (wrong job id, different ε, a
  replayed sequence number, an unknown job, a second join of a job whose state is gone, as
  after an agent restart) is refused by a real agent, and nothing is charged twice;
* two nodes contribute a locally fitted model each in one call; the coordinator averages them;
* a node whose agent is killed mid-protocol fails the job, every node keeping its charge;
* the noisy average over remote contributions is refused with a 422 that says why.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from service.db.session import make_engine, make_sessionmaker
from service.db.uow import UnitOfWork
from service.domain.datasets.catalog import load_design
from service.domain.randomness import Randomness
from service.dp.federated import federated_fit
from service.main import create_app
from tests.conftest import make_test_settings
from tests.support.live_server import ROOT, LiveServer, server_environment, start_server
from tests.support.snapshots import copy_sqlite

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ADMIN = "pf_admin_" + "n" * 40
SEED = 20261128
LABEL = {"column": "outcome", "positive": "yes"}
FEATURES = [
    {"column": "dose", "type": "numeric", "lower": 0, "upper": 100},
    {"column": "arm", "type": "categorical", "categories": ["a", "b"]},
]
#: Seconds a server may take to answer /readyz (the test machine may be shared and busy).
READY_TIMEOUT = 300.0
#: Each node's row count: distinctive numbers searched for in what the coordinator holds.
ROWS = (1187, 1319, 1429)
#: A value only node k's rows contain (as written in its CSV).
MARKERS = ("41.2837", "57.6519", "63.9142")


@dataclass
class Node:
    api: httpx2.Client  # the node's API: a ``privfit serve`` process, or the app in-process
    env: dict[str, str]
    database_url: str
    key: str  # the site's key on the node
    coordinator_key: str  # the site's key on the coordinator
    dataset_id: str = ""
    contribution_id: str = ""
    agent: subprocess.Popen[str] | None = None
    agent_log: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def start_agent(self) -> None:
        self.agent = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "agent"],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.agent.stdout is not None
        ready = threading.Event()

        def pump(stream: Any) -> None:
            for line in iter(stream.readline, ""):
                self.agent_log.append(line)
                if "agent polling" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=pump, args=(self.agent.stdout,), daemon=True).start()
        assert ready.wait(timeout=120), "the agent did not start"
        assert self.agent.poll() is None, "".join(self.agent_log)

    def signal_agent(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the agent if it still runs (SIGTERM: it ends after its long poll)."""
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(sig)

    def stop_agent(self, sig: int = signal.SIGTERM) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(sig)
            self.agent.wait(timeout=60)
        self.agent = None

    def budget(self) -> dict[str, Any]:
        r = self.api.get(f"/v1/datasets/{self.dataset_id}/budget", headers=self.headers)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out


@dataclass
class Network:
    coordinator: LiveServer
    coordinator_db: Path
    coord_key: str
    study_id: str
    nodes: list[Node]
    responses: list[str] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.coord_key}"}

    def fit(self, body: dict[str, Any], *, wait: int = 30) -> tuple[int, dict[str, Any]]:
        """POST a federated fit and, with Prefer: wait, follow it until it ends."""
        r = httpx2.post(
            f"{self.coordinator.base_url}/v1/studies/{self.study_id}/federated-fits",
            json=body,
            headers={**self.headers, "Prefer": f"wait={wait}"},
            timeout=wait + 30,
        )
        self.responses.append(r.text)
        out: dict[str, Any] = r.json()
        while r.status_code < 400 and out["status"] not in ("succeeded", "failed", "cancelled"):
            # a long poll: answered when the job ends or after `wait` seconds
            r = httpx2.get(
                f"{self.coordinator.base_url}/v1/jobs/{out['id']}?wait={wait}",
                headers=self.headers,
                timeout=wait + 30,
            )
            self.responses.append(r.text)
            out = r.json()
        return r.status_code, out

    def get(self, path: str) -> dict[str, Any]:
        r = httpx2.get(f"{self.coordinator.base_url}{path}", headers=self.headers, timeout=30)
        self.responses.append(r.text)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out


def _rows(k: int) -> bytes:
    rng = np.random.default_rng(100 + k)
    lines = ["dose,arm,outcome"]
    for i in range(ROWS[k]):
        dose = MARKERS[k] if i == 7 else f"{rng.uniform(0, 100):.2f}"
        arm = "a" if rng.random() < 0.5 else "b"
        logit = (float(dose) - 50) / 15 + (0.8 if arm == "a" else -0.4)
        outcome = "yes" if rng.random() < 1 / (1 + np.exp(-logit)) else "no"
        lines.append(f"{dose},{arm},{outcome}")
    return ("\n".join(lines) + "\n").encode()


def _site(api: httpx2.Client, name: str) -> tuple[str, str]:
    r = api.post("/v1/sites", json={"name": name}, headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 201, r.text
    body = r.json()
    return body["site"]["id"], body["key"]["api_key"]


@contextmanager
def _network(tmp: Path, sqlite_template: Path, *, nodes: int, lean: bool) -> Iterator[Network]:
    """A coordinator and ``nodes`` nodes, each with a dataset offered to the coordinator's study
    and its ``privfit agent`` running; every database a copy of the session's migrated SQLite
    template (``privfit migrate`` is tested in tests/test_cli.py and tests/e2e/test_serve.py).

    ``lean=False``: the coordinator on the default process pool, as a coordinator starts by
    default, and each node's API its own ``privfit serve`` on the thread runner (a node runs no
    job of its own here: its agent answers the coordinator's tasks). ``lean=True``: the
    coordinator on the thread runner (its node fits run on a thread of its API process either
    way: tests/integration/test_node_fit_routing.py) and each node's API the app in the test
    process on the node's database, so that the processes are the ones the protocol runs
    across — the coordinator and the agents — and no interpreter is started that adds no
    check."""
    coordinator_db = tmp / "coordinator.db"
    test_env = {"PRIVFIT_ENVIRONMENT": "test", "PRIVFIT_TEST_SEED": str(SEED)}
    runner = {"PRIVFIT_JOB_RUNNER": "thread"} if lean else {}
    with (
        start_server(
            f"sqlite:///{coordinator_db}",
            admin_key=ADMIN,
            workdir=tmp,
            extra_env={**test_env, **runner, "PRIVFIT_NODE_TASK_DEADLINE": "20"},
            ready_timeout=READY_TIMEOUT,
            migrated=sqlite_template,
        ) as coordinator,
        httpx2.Client(base_url=coordinator.base_url, timeout=60) as coordinator_api,
    ):
        _coord_id, coord_key = _site(coordinator_api, "coordinator")
        members = [_site(coordinator_api, f"hospital-{k}") for k in range(nodes)]
        r = coordinator_api.post(
            "/v1/studies",
            json={
                "name": "dose study",
                "members": [m[0] for m in members],
                "spec": {"label": LABEL, "features": FEATURES},
            },
            headers={"Authorization": f"Bearer {coord_key}"},
        )
        assert r.status_code == 201, r.text
        study_id = r.json()["id"]
        stack = ExitStack()
        started: list[Node] = []

        def node_api(db: Path, member_key: str) -> httpx2.Client:
            """A node's API over its database ``db``."""
            if lean:
                copy_sqlite(sqlite_template, db)
                settings = make_test_settings(
                    f"sqlite:///{db}",
                    admin_key=SecretStr(ADMIN),
                    test_seed=SEED,
                    coordinator_url=coordinator.base_url,
                    coordinator_key=SecretStr(member_key),
                )
                return stack.enter_context(TestClient(create_app(settings)))
            server = stack.enter_context(
                start_server(
                    f"sqlite:///{db}",
                    admin_key=ADMIN,
                    workdir=tmp,
                    extra_env={
                        **test_env,
                        "PRIVFIT_COORDINATOR_URL": coordinator.base_url,
                        "PRIVFIT_COORDINATOR_KEY": member_key,
                        "PRIVFIT_JOB_RUNNER": "thread",
                    },
                    ready_timeout=READY_TIMEOUT,
                    migrated=sqlite_template,
                )
            )
            return stack.enter_context(httpx2.Client(base_url=server.base_url, timeout=90))

        def bring_up(k: int) -> Node:
            """Node k: its own API and database, a dataset, the offer and the agent."""
            member_key = members[k][1]
            db = tmp / f"node{k}.db"
            api = node_api(db, member_key)
            extra = {
                **test_env,
                "PRIVFIT_COORDINATOR_URL": coordinator.base_url,
                "PRIVFIT_COORDINATOR_KEY": member_key,
                "PRIVFIT_AGENT_POLL_SECONDS": "5",
            }
            env = {
                **server_environment(f"sqlite:///{db}", admin_key=ADMIN, port=1, extra=extra),
                "PYTHONPATH": str(ROOT),
            }
            _, key = _site(api, f"hospital-{k}")
            node = Node(api, env, f"sqlite:///{db}", key, member_key)
            spec = {
                "name": f"ward-{k}",
                "label": LABEL,
                "features": FEATURES,
                "budget": {"epsilon": 10.0, "delta": 1e-4},
            }
            r = api.post(
                "/v1/datasets",
                files={
                    "file": ("rows.csv", _rows(k), "text/csv"),
                    "spec": (None, json.dumps(spec)),
                },
                headers=node.headers,
            )
            assert r.status_code == 201, r.text
            node.dataset_id = r.json()["id"]
            cap = 6.0 if k == 0 else 9.0
            r = api.post(
                f"/v1/datasets/{node.dataset_id}/offers",
                json={"study_id": study_id, "epsilon_cap": cap, "delta_cap": 1e-4},
                headers=node.headers,
            )
            assert r.status_code == 201, r.text
            node.contribution_id = r.json()["contribution_id"]
            started.append(node)
            node.start_agent()
            return node

        with stack:
            try:
                # the nodes come up side by side (each is its own set of processes)
                with ThreadPoolExecutor(max_workers=nodes) as pool:
                    network_nodes = list(pool.map(bring_up, range(nodes)))
                yield Network(coordinator, coordinator_db, coord_key, study_id, network_nodes)
            finally:
                # every agent told to stop before any is waited for: each ends its long poll
                for node in started:
                    node.signal_agent()
                for node in started:
                    node.stop_agent()


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Network]:
    """The heavy tier's network: the coordinator on the default process pool and three nodes,
    each a ``privfit serve`` and a ``privfit agent``."""
    with _network(tmp_path_factory.mktemp("nodes"), sqlite_template, nodes=3, lean=False) as net:
        yield net


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Network]:
    """The default tier's network: a coordinator process and two nodes, each a ``privfit
    agent`` process with its API in the test process (three nodes are the in-process tests',
    tests/integration/test_node_tasks.py, and the heavy tier's)."""
    with _network(tmp_path_factory.mktemp("pair"), sqlite_template, nodes=2, lean=True) as net:
        yield net


def _designs(network: Network) -> list[tuple[Any, Any]]:
    out = []
    for node in network.nodes:
        engine = make_engine(node.database_url)
        try:
            out.append(load_design(partial(UnitOfWork, make_sessionmaker(engine)), node.dataset_id))
        finally:
            engine.dispose()
    return out


def _coefficients(network: Network, job: dict[str, Any]) -> np.ndarray:
    model = network.get(f"/v1/models/{job['model_id']}")
    return np.array([c["weight"] for c in model["coefficients"]])


CASES: dict[str, dict[str, Any]] = {
    "psgd": {"protocol": "psgd", "epsilon": 1.0, "delta": 1e-5, "params": {"iterations": 20}},
    "admm_dual": {
        "protocol": "admm",
        "epsilon": 1.0,
        "params": {"perturbation": "dual", "iterations": 6},
    },
    "admm_primal": {
        "protocol": "admm",
        "epsilon": 1.0,
        "params": {"perturbation": "primal", "iterations": 6},
    },
    "distributed_lasso": {
        "protocol": "distributed_lasso",
        "epsilon": 1.0,
        "delta": 1e-5,
        "regularization": 0.001,
        "params": {"iterations": 20},
    },
}


def _children_command_lines(pid: int) -> list[str]:
    """The command lines of a process's children (Linux ``/proc``)."""
    children: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        children.update(int(c) for c in (task / "children").read_text().split())
    lines = []
    for child in children:
        try:
            lines.append(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # it just exited
            continue
    return lines


# Heavy tier (issue 27 §5), with the other tests here marked so: each repeats over real
# processes what the default tier tests in-process — the process runner's node fits on the API
# process (tests/api/test_node_fits.py, tests/integration/test_node_fit_routing.py), forged,
# replayed and restarted tasks and withdrawn offers (tests/integration/test_node_tasks.py) — and
# CI runs them in `make test-heavy`. The default tier keeps one smoke (issue 27 §5): a psgd fit
# over real agents on the lean two-node network (:func:`pair`), exactly the in-process fit, each
# node charged once; the three-node network of real servers costs ≈ 22 s of CPU (eight
# interpreters), the pair ≈ 9 s (three). The other protocols, the
# refusals, the local models and the scan of the coordinator are heavy too (each protocol's
# exactness and the refusals are tested in-process: tests/integration/test_node_tasks.py,
# tests/integration/test_node_privacy.py, tests/api/test_node_fits.py).
@pytest.mark.heavy
def test_the_coordinator_runs_jobs_in_a_pool_of_worker_processes(network: Network) -> None:
    """The default runner: the pool's warmed worker is a spawned child of the server."""
    lines = _children_command_lines(network.coordinator.process.pid)
    assert any("spawn_main" in line for line in lines), lines


@pytest.mark.parametrize(
    ("case", "nodes"),
    [
        # the default tier's smoke: psgd across a coordinator process and two agent processes
        pytest.param("psgd", "pair", id="psgd"),
        # every protocol over the three-node network of real servers (heavy, see above)
        *(
            pytest.param(case, "network", id=f"{case}-three-nodes", marks=pytest.mark.heavy)
            for case in CASES
        ),
    ],
)
def test_remote_fit_equals_the_in_process_fit(
    request: pytest.FixtureRequest, case: str, nodes: str
) -> None:
    network: Network = request.getfixturevalue(nodes)
    body: dict[str, Any] = {
        "regularization": 0.01,
        **CASES[case],
        "datasets": [n.contribution_id for n in network.nodes],
    }
    before = [n.budget() for n in network.nodes]
    _status, job = network.fit(body)
    assert job["status"] == "succeeded", (
        job.get("error"),
        [n.agent_log[-5:] for n in network.nodes],
        "".join(network.coordinator.stderr)[-3000:],
    )
    released = _coefficients(network, job)
    params = dict(body.get("params") or {})
    expected = federated_fit(
        _designs(network),
        body["protocol"],
        epsilon=body["epsilon"],
        delta=body.get("delta", 0.0),
        loss="squared" if body["protocol"] == "distributed_lasso" else "logistic",
        regularization=body["regularization"],
        rng=np.random.default_rng(Randomness(seed=SEED).job_seed(job["id"])),
        **params,
    )
    np.testing.assert_allclose(released, expected.coef, rtol=0, atol=1e-9)
    # every node charged its own ledger once, for the whole job
    model = network.get(f"/v1/models/{job['model_id']}")
    record = model["privacy"]
    nodes_in_record = [d for d in record["datasets"] if d.get("kind") == "node"]
    assert [d["node_dataset_id"] for d in nodes_in_record] == [n.dataset_id for n in network.nodes]
    for node, old, entry in zip(network.nodes, before, nodes_in_record, strict=True):
        new = node.budget()
        charged = new["epsilon_spent"] - old["epsilon_spent"]
        assert charged == pytest.approx(entry["charged_by_this_job"]["epsilon"], abs=1e-9)
        assert 0 < charged <= body["epsilon"] + 1e-9


@pytest.mark.heavy  # the psgd fit is this module's smoke (see above)
def test_noisy_average_over_nodes_is_refused_with_a_reason(network: Network) -> None:
    r = httpx2.post(
        f"{network.coordinator.base_url}/v1/studies/{network.study_id}/federated-fits",
        json={
            "protocol": "noisy_average",
            "epsilon": 1.0,
            "regularization": 0.01,
            "datasets": [n.contribution_id for n in network.nodes],
        },
        headers=network.headers,
        timeout=30,
    )
    network.responses.append(r.text)
    assert r.status_code == 422, r.text
    assert "trusted curator" in r.json()["detail"]


@pytest.mark.heavy  # the psgd fit is this module's smoke (see above)
def test_a_task_outside_the_offer_is_refused(network: Network) -> None:
    before = [n.budget()["epsilon_spent"] for n in network.nodes]
    # node 0 offered at most ε = 6 to the study in all
    _, job = network.fit(
        {
            "protocol": "admm",
            "epsilon": 7.0,
            "regularization": 0.01,
            "params": {"perturbation": "dual", "iterations": 3},
            "datasets": [n.contribution_id for n in network.nodes],
        }
    )
    assert job["status"] == "failed"
    assert job["error"]["type"].endswith("/node-refused")
    assert "offer's caps" in job["error"]["detail"]
    assert [n.budget()["epsilon_spent"] for n in network.nodes] == before


@pytest.mark.heavy  # the psgd fit is this module's smoke (see above)
def test_nodes_contribute_local_models_that_the_coordinator_averages(network: Network) -> None:
    contributions = []
    for node in network.nodes[:2]:
        r = node.api.post(
            f"/v1/datasets/{node.dataset_id}/fits",
            json={
                "mechanism": "objective_perturbation",
                "epsilon": 0.5,
                "delta": 0.0,
                "loss": "logistic",
                "regularization": 0.05,
            },
            headers={**node.headers, "Prefer": "wait=30"},
            timeout=90,
        )
        assert r.status_code == 201, r.text
        assert r.json()["status"] == "succeeded", r.text
        model_id = r.json()["model_id"]
        r = node.api.post(
            f"/v1/models/{model_id}/offers",
            json={"study_id": network.study_id},
            headers=node.headers,
            timeout=60,
        )
        assert r.status_code == 201, r.text
        offer = r.json()
        contributions.append(offer["contribution_id"])
        # the copy on the coordinator belongs to the node's site there
        uploaded = httpx2.get(
            f"{network.coordinator.base_url}/v1/models/{offer['coordinator_model_id']}",
            headers={"Authorization": f"Bearer {node.coordinator_key}"},
            timeout=30,
        ).json()
        local = node.api.get(f"/v1/models/{model_id}", headers=node.headers).json()
        assert [c["weight"] for c in uploaded["coefficients"]] == [
            c["weight"] for c in local["coefficients"]
        ]
        assert model_id in json.dumps(uploaded["privacy"])
    r = httpx2.post(
        f"{network.coordinator.base_url}/v1/studies/{network.study_id}/aggregations",
        json={"method": "average", "name": "ward average"},
        headers={**network.headers, "Prefer": "wait=30"},
        timeout=90,
    )
    network.responses.append(r.text)
    assert r.status_code in (201, 202), r.text
    assert r.json()["status"] == "succeeded", r.text


# --- a compromised coordinator --------------------------------------------------------------


class RogueCoordinator:
    """A coordinator that sends scripted tasks, one at a time, and records the answers."""

    def __init__(self, tasks: list[dict[str, Any]]) -> None:
        self.tasks = list(tasks)
        self.answers: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.outstanding = False
        rogue = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                with rogue.cond:
                    rogue.cond.wait_for(
                        lambda: not rogue.outstanding and bool(rogue.tasks), timeout=1.0
                    )
                    if rogue.outstanding or not rogue.tasks:
                        self._send(204)
                        return
                    task = rogue.tasks.pop(0)
                    rogue.outstanding = True
                self._send(200, json.dumps(task).encode())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with rogue.cond:
                    rogue.answers.append(body)
                    rogue.outstanding = False
                    rogue.cond.notify_all()
                self._send(204)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for_answers(self, count: int, timeout: float = 120.0) -> list[dict[str, Any]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.answers) >= count, timeout=timeout), (
                self.answers
            )
            return list(self.answers)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _task(node: Node, job_id: str, seq: int, step: str, **terms: Any) -> dict[str, Any]:
    base = {
        "job_id": job_id,
        "protocol": "psgd",
        "epsilon": 0.1,
        "delta": 1e-5,
        "loss": "logistic",
        "regularization": 0.01,
        "params": {"iterations": 3},
        "rounds": 3,
        "sites": 3,
        "index": 1,
        "seed": None,
    }
    base.update(terms)
    return {
        "task_id": f"{job_id}-{seq}-{step}",
        "contribution_id": node.contribution_id,
        "job_id": job_id,
        "seq": seq,
        "step": step,
        "terms": base,
        "vectors": [],
    }


@pytest.mark.heavy  # in-process: tests/integration/test_node_tasks.py (see above)
def test_forged_and_replayed_tasks_are_refused(network: Network) -> None:
    node = network.nodes[1]
    before = node.budget()["epsilon_spent"]
    tasks = [
        _task(node, "rogue-a", 1, "join"),
        _task(node, "rogue-a", 2, "prepare", epsilon=5.0),  # a different ε than accepted
        _task(node, "rogue-a", 1, "join"),  # joined again (as after an agent restart)
        _task(node, "rogue-b", 1, "join"),
        _task(node, "rogue-z", 2, "prepare"),  # a job id the node never accepted
        _task(node, "rogue-b", 1, "prepare"),  # a replayed sequence number
        {**_task(node, "rogue-c", 1, "join"), "job_id": "rogue-d"},  # job ids that disagree
        _task(node, "rogue-e", 1, "join", protocol="admm", params={"perturbation": "none"}),
        _task(node, "rogue-f", 1, "join", epsilon=50.0),  # beyond the offer
    ]
    rogue = RogueCoordinator(tasks)
    env = {**node.env, "PRIVFIT_COORDINATOR_URL": rogue.url, "PRIVFIT_AGENT_POLL_SECONDS": "1"}
    agent = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "agent"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        answers = rogue.wait_for_answers(len(tasks))
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=60)
        rogue.close()
    assert "n" in answers[0]
    assert answers[0]["charged"]["epsilon"] == pytest.approx(0.1)
    assert "epsilon" in answers[1]["refused"]
    assert "already accepted" in answers[2]["refused"]  # and not charged again
    assert "n" in answers[3]
    assert "never accepted" in answers[4]["refused"]
    assert "replayed" in answers[5]["refused"]
    assert "job id" in answers[6]["refused"]
    assert "refused" in answers[7]
    assert "offer" in answers[8]["refused"]
    # the node charged the two jobs it accepted, and nothing for the refused tasks
    assert node.budget()["epsilon_spent"] == pytest.approx(before + 0.2, abs=1e-9)


# --- privacy of what the coordinator holds, and failure ----------------------------------


def _scan(text: str) -> list[str]:
    found = [m for m in MARKERS if m in text]
    found += [str(n) for n in ROWS if re.search(rf"(?<![0-9A-Za-z.]){n}(?![0-9A-Za-z.])", text)]
    return found


@pytest.mark.heavy  # the psgd fit is this module's smoke (see above)
def test_the_coordinator_holds_no_rows_and_no_row_counts(network: Network) -> None:
    for node in network.nodes:
        network.get(f"/v1/studies/{network.study_id}/remote-contributions")
        network.get(f"/v1/studies/{network.study_id}")
        del node
    stored = b"".join(
        p.read_bytes()
        for p in network.coordinator_db.parent.glob(network.coordinator_db.name + "*")
    ).decode("latin-1")
    assert _scan(stored) == []
    assert _scan("".join(network.coordinator.stdout + network.coordinator.stderr)) == []
    assert _scan("\n".join(network.responses)) == []


@pytest.mark.heavy  # in-process: test_node_tasks.py's agent and coordinator restarts
def test_a_node_killed_mid_protocol_fails_the_job_and_charges_stay(network: Network) -> None:
    before = [n.budget()["epsilon_spent"] for n in network.nodes]
    victim = network.nodes[2]
    outcome: dict[str, Any] = {}
    body = {
        "protocol": "psgd",
        "epsilon": 0.5,
        "delta": 1e-5,
        "regularization": 0.01,
        "params": {"iterations": 100000},
        "datasets": [n.contribution_id for n in network.nodes],
    }
    runner = threading.Thread(target=lambda: outcome.update(job=network.fit(body)[1]))
    runner.start()
    # the victim has joined (and charged) once its spent budget moved
    deadline = 120
    for _ in range(deadline * 10):
        if victim.budget()["epsilon_spent"] > before[2]:
            break
        threading.Event().wait(0.1)
    victim.stop_agent(signal.SIGKILL)
    runner.join(timeout=180)
    victim.start_agent()
    job = outcome["job"]
    assert job["status"] == "failed"
    assert job["error"]["type"].endswith("node-silent")
    after = [n.budget()["epsilon_spent"] for n in network.nodes]
    assert after == pytest.approx([b + 0.5 for b in before], abs=1e-9)


@pytest.mark.heavy  # in-process: tests/integration/test_node_tasks.py (see above)
def test_an_offer_is_withdrawn_from_either_side(network: Network) -> None:
    """A node withdraws its own offer; the study's coordinator withdraws a node's contribution.
    Each uses a second offer of its own, so the network's other tests keep theirs."""
    withdrawn = {}
    for node in network.nodes[:2]:
        r = node.api.post(
            f"/v1/datasets/{node.dataset_id}/offers",
            json={"study_id": network.study_id, "epsilon_cap": 0.5, "delta_cap": 0.0},
            headers=node.headers,
            timeout=30,
        )
        assert r.status_code == 201, r.text
        withdrawn[node.dataset_id] = r.json()
    # the node's side: recorded here, then told to the coordinator
    first, second = network.nodes[0], network.nodes[1]
    offer = withdrawn[first.dataset_id]
    r = first.api.delete(
        f"/v1/datasets/{first.dataset_id}/offers/{offer['id']}", headers=first.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["withdrawn_at"] is not None
    # the coordinator's side
    contribution = withdrawn[second.dataset_id]["contribution_id"]
    r = httpx2.delete(
        f"{network.coordinator.base_url}/v1/studies/{network.study_id}"
        f"/remote-contributions/{contribution}",
        headers=network.headers,
        timeout=30,
    )
    assert r.status_code < 300, r.text
    listed = {
        c["id"]: c
        for c in network.get(f"/v1/studies/{network.study_id}/remote-contributions")["items"]
    }
    assert listed[offer["contribution_id"]]["withdrawn_at"] is not None
    assert listed[contribution]["withdrawn_at"] is not None
    # the network's own offers are untouched
    assert all(listed[n.contribution_id]["withdrawn_at"] is None for n in network.nodes)
    # a withdrawn contribution takes part in no fit
    status, problem = network.fit(
        {
            "protocol": "admm",
            "epsilon": 0.5,
            "regularization": 0.01,
            "params": {"perturbation": "dual", "iterations": 3},
            "datasets": [offer["contribution_id"], *(n.contribution_id for n in network.nodes[1:])],
        }
    )
    assert status == 422, problem
