"""Site nodes (issue 15): a federated fit over three nodes against the in-process fit.

Adult (the published training split, ``benchmarks.adult.csv_bytes``, spec
``datasets/adult/spec.json``) is split in three contiguous thirds; each third is uploaded to
its own node (``privfit serve`` + ``privfit agent``, its own SQLite database) and offered to a
study on a coordinator (``privfit serve``, SQLite, thread job runner), all on 127.0.0.1 in
child processes. For each protocol — ``admm`` with dual perturbation and 50 rounds, ``psgd``
with 50 noisy rounds, ``distributed_lasso`` (``lasso``, 200
noisy rounds, squared loss) — and each repeat:

* ``nodes``: ``POST /v1/studies/{id}/federated-fits`` over the three remote contributions with
  ``Prefer: wait``, timed from the request to the job's end (every task a round trip from the
  coordinator to a node's agent and back over HTTP);
* ``in-process``: ``service.dp.federated.federated_fit`` over the same three designs (read
  from the nodes' databases) in this process.

Printed: median total times, the ratio nodes / in-process (issue 25's target is ≤ 1.5), the
time per round (total / communication rounds), the slowest node's local work per
round (the seconds each agent logs for running the protocol's steps, divided by the rounds;
the largest of the three nodes) and the ratio of the time per round to it (issue 25's target
is ≤ 1.3), and the JSON bytes each node received (tasks) and sent (answers) per round, as the
agents log them (bodies only: HTTP headers and the long polls that came back empty are not
counted). Run from the repository root::

    .venv/bin/python -m benchmarks.bench_nodes --repeats 3
    .venv/bin/python -m benchmarks.bench_nodes --repeats 1 --rounds 10 --protocols admm,lasso

``--rounds`` replaces every protocol's number of (noisy) rounds, for a quicker run on a busy
machine; ``--protocols`` picks among ``admm``, ``psgd`` and ``lasso``; ``--threads 1`` runs
every server, agent and the in-process fit with single-threaded BLAS (three nodes on one
2-core machine otherwise run 2-thread OpenBLAS calls side by side, which wait for each other's
cores: ``benchmarks._common.limit_threads``).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import environment, limit_threads, load_average, markdown_table, median
from benchmarks.adult import csv_bytes, load_spec
from service.db.session import make_engine, make_sessionmaker
from service.db.uow import UnitOfWork
from service.domain.datasets.catalog import load_design
from service.dp.federated import federated_fit
from service.runtime.queue_runner import BLAS_THREAD_VARIABLES
from tests.e2e.test_nodes import Node
from tests.support.live_server import ROOT, server_environment, start_server

ADMIN = "pf_admin_" + "b" * 40

#: The protocols run, by ``--protocols`` name: the request body (its ``iterations`` replaced
#: by ``--rounds``), and the node tasks per round and outside the rounds.
PROTOCOLS: dict[str, dict[str, Any]] = {
    "admm": {
        "label": "admm (dual, {rounds} rounds)",
        "body": {
            "protocol": "admm",
            "epsilon": 1.0,
            "regularization": 0.001,
            "params": {"perturbation": "dual", "iterations": 50},
        },
        # local step + dual update per round; join, prepare, finish
        "tasks": (2, 3),
    },
    "psgd": {
        "label": "psgd ({rounds} noisy rounds)",
        "body": {
            "protocol": "psgd",
            "epsilon": 1.0,
            "delta": 1e-6,
            "regularization": 0.001,
            "params": {"iterations": 50},
        },
        # one noisy gradient per round; join, prepare, finish
        "tasks": (1, 3),
    },
    "lasso": {
        "label": "distributed_lasso ({rounds} rounds)",
        "body": {
            "protocol": "distributed_lasso",
            "epsilon": 1.0,
            "delta": 1e-6,
            "loss": "squared",
            "regularization": 0.001,
            "params": {"iterations": 200},
        },
        # one noisy gradient sum per round; join, prepare, finish
        "tasks": (1, 3),
    },
}

_TRAFFIC = re.compile(
    r"job (\w+) ended on this node: (\d+) tasks, (\d+) bytes of tasks received, "
    r"(\d+) bytes of answers sent(?:, ([\d.]+) s running the protocol's steps)?"
)


def _site(client: httpx.Client, base: str, name: str) -> tuple[str, str]:
    r = client.post(
        f"{base}/v1/sites", json={"name": name}, headers={"Authorization": f"Bearer {ADMIN}"}
    )
    r.raise_for_status()
    body = r.json()
    return body["site"]["id"], body["key"]["api_key"]


def _thirds() -> list[bytes]:
    lines = csv_bytes("train").decode().splitlines()
    header, rows = lines[0], lines[1:]
    cut = [0, len(rows) // 3, 2 * len(rows) // 3, len(rows)]
    return [("\n".join([header, *rows[cut[k] : cut[k + 1]]]) + "\n").encode() for k in range(3)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=None, help="replace every protocol's number of rounds"
    )
    parser.add_argument("--protocols", default="admm,psgd", help="comma-separated: admm,psgd,lasso")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="native (BLAS/OpenMP) threads of every server, agent and the in-process fit "
        "(default: the libraries' own; see benchmarks._common.limit_threads)",
    )
    args = parser.parse_args()
    _threads = limit_threads(args.threads)
    native = (
        {} if args.threads is None else {name: str(args.threads) for name in BLAS_THREAD_VARIABLES}
    )
    chosen: dict[str, tuple[str, dict[str, Any], tuple[int, int]]] = {}
    for key in args.protocols.split(","):
        entry = PROTOCOLS[key.strip()]
        body: dict[str, Any] = json.loads(json.dumps(entry["body"]))
        if args.rounds is not None:
            body["params"]["iterations"] = args.rounds
        label = str(entry["label"]).format(rounds=body["params"]["iterations"])
        chosen[label] = (key, body, entry["tasks"])
    load_before = load_average()
    started = time.perf_counter()
    client = httpx.Client(timeout=600)
    tmp = Path(tempfile.mkdtemp(prefix="bench_nodes_"))
    results: dict[str, dict[str, list[float]]] = {}
    traffic: dict[str, list[tuple[float, ...]]] = {}
    last_job: dict[str, str] = {}
    with start_server(
        f"sqlite:///{tmp / 'coord.db'}",
        admin_key=ADMIN,
        workdir=tmp,
        extra_env={
            "PRIVFIT_JOB_RUNNER": "thread",
            "PRIVFIT_NODE_TASK_DEADLINE": "120",
            **native,
        },
        ready_timeout=300,
    ) as coordinator:
        _, coord_key = _site(client, coordinator.base_url, "coordinator")
        members = [_site(client, coordinator.base_url, f"node-{k}") for k in range(3)]
        spec = load_spec()
        study_spec = {k: spec[k] for k in ("label", "features")}
        r = client.post(
            f"{coordinator.base_url}/v1/studies",
            json={"name": "adult", "members": [m[0] for m in members], "spec": study_spec},
            headers={"Authorization": f"Bearer {coord_key}"},
        )
        r.raise_for_status()
        study = r.json()["id"]
        nodes: list[Node] = []
        thirds = _thirds()
        servers = []
        try:
            for k, (_, member_key) in enumerate(members):
                db = tmp / f"node{k}.db"
                extra = {
                    "PRIVFIT_COORDINATOR_URL": coordinator.base_url,
                    "PRIVFIT_COORDINATOR_KEY": member_key,
                    **native,
                }
                ctx = start_server(
                    f"sqlite:///{db}",
                    admin_key=ADMIN,
                    workdir=tmp,
                    extra_env=extra,
                    ready_timeout=300,
                )
                server = ctx.__enter__()
                servers.append(ctx)
                env = {
                    **server_environment(f"sqlite:///{db}", admin_key=ADMIN, port=1, extra=extra),
                    "PYTHONPATH": str(ROOT),
                }
                _, key = _site(client, server.base_url, f"node-{k}")
                node = Node(server, env, f"sqlite:///{db}", key, member_key)
                r = client.post(
                    f"{server.base_url}/v1/datasets",
                    files={
                        "file": ("adult.csv", thirds[k], "text/csv"),
                        "spec": (
                            None,
                            json.dumps(
                                {
                                    **spec,
                                    "name": f"adult-{k}",
                                    "budget": {"epsilon": 10.0, "delta": 1e-5},
                                }
                            ),
                        ),
                    },
                    headers=node.headers,
                )
                r.raise_for_status()
                node.dataset_id = r.json()["id"]
                r = client.post(
                    f"{server.base_url}/v1/datasets/{node.dataset_id}/offers",
                    json={"study_id": study, "epsilon_cap": 10.0, "delta_cap": 1e-5},
                    headers=node.headers,
                )
                r.raise_for_status()
                node.contribution_id = r.json()["contribution_id"]
                node.start_agent()
                nodes.append(node)
            designs = []
            for node in nodes:
                engine = make_engine(node.database_url)
                designs.append(
                    load_design(partial(UnitOfWork, make_sessionmaker(engine)), node.dataset_id)
                )
                engine.dispose()
            for name, (_, body, _) in chosen.items():
                results[name] = {"nodes": [], "in-process": []}
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    r = client.post(
                        f"{coordinator.base_url}/v1/studies/{study}/federated-fits",
                        json={**body, "datasets": [n.contribution_id for n in nodes]},
                        headers={"Authorization": f"Bearer {coord_key}", "Prefer": "wait=30"},
                    )
                    job = r.json()
                    while job["status"] not in ("succeeded", "failed", "cancelled"):
                        job = client.get(
                            f"{coordinator.base_url}/v1/jobs/{job['id']}?wait=30",
                            headers={"Authorization": f"Bearer {coord_key}"},
                        ).json()
                    elapsed = time.perf_counter() - t0
                    if job["status"] != "succeeded":
                        raise SystemExit(f"{name}: the job ended {job['status']}: {job['error']}")
                    t0 = time.perf_counter()
                    federated_fit(
                        designs,
                        body["protocol"],
                        epsilon=body["epsilon"],
                        delta=body.get("delta", 0.0),
                        loss=body.get("loss", "logistic"),
                        regularization=body["regularization"],
                        **body["params"],
                    )
                    results[name]["nodes"].append(elapsed)
                    results[name]["in-process"].append(time.perf_counter() - t0)
                    last_job[name] = str(job["id"])
                # the agents log each job's traffic when it ends
                threading.Event().wait(1.0)
                job_id = last_job[name]
                per_node = []
                for node in nodes:
                    for line in node.agent_log:
                        m = _TRAFFIC.search(line)
                        if m and m.group(1) == job_id:
                            per_node.append(tuple(float(g or "nan") for g in m.groups()[1:]))
                traffic[name] = per_node
        finally:
            for node in nodes:
                node.stop_agent()
            for ctx in reversed(servers):
                ctx.__exit__(None, None, None)
    rows = []
    for name, res in results.items():
        nodes_t, local_t = median(res["nodes"]), median(res["in-process"])
        per = traffic.get(name) or []
        tasks = int(max((t[0] for t in per), default=0))
        # a round is one noisy step per node (ADMM: and a dual update)
        steps_per_round, overhead = chosen[name][2]
        rounds = max(1, (tasks - overhead) // steps_per_round)
        received = median([t[1] / rounds for t in per]) if per else float("nan")
        sent = median([t[2] / rounds for t in per]) if per else float("nan")
        # the slowest node's own work per round (the last job's log), in ms
        slowest = max((1000 * t[3] / rounds for t in per), default=float("nan"))
        per_round = 1000 * nodes_t / rounds
        rows.append(
            [
                name,
                f"{nodes_t:.2f}",
                f"{local_t:.2f}",
                f"{nodes_t / local_t:.2f}",
                f"{per_round:.1f}",
                f"{slowest:.1f}",
                f"{per_round / slowest:.2f}",
                f"{rounds}",
                f"{received:.0f}",
                f"{sent:.0f}",
            ]
        )
    print(environment(args.threads))
    print(
        markdown_table(
            [
                "protocol",
                "nodes total (s)",
                "in-process total (s)",
                "ratio",
                "per round, nodes (ms)",
                "slowest node's steps per round (ms)",
                "per round / slowest node",
                "rounds",
                "bytes received per round per node",
                "bytes sent per round per node",
            ],
            rows,
        )
    )
    print(
        f"{args.repeats} repeats, medians. Total run time {time.perf_counter() - started:.0f} s; "
        f"load average before {load_before}, after {load_average()}."
    )
    print(json.dumps({"results": results, "traffic": traffic}, default=str))


if __name__ == "__main__":
    main()
