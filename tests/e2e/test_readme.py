"""The README's walkthroughs, run as written against a server the test starts.

Every ```sh block of README.md and every ```python block tagged ``walkthrough`` (the Python
client's example) is extracted in order and executed by one bash process with
``set -euo pipefail``, as a reader pastes them into one shell at the repository's root (blocks
tagged ``no-test`` — `make run`, Docker, createdb — are skipped; a Python block runs in
``.venv/bin/python``). That covers the single-site and study walkthroughs with curl, the Python
client, the ``privfit-client`` command line, and the site-node walkthrough, which starts two
nodes (``privfit serve`` and ``privfit agent`` each) in the background. The only
substitutions are the ones a reader makes: the admin key they paste (``ADMIN=pf_...``,
``ADMIN = "pf_..."``) is the server's, and the ports (``8000`` of the server, ``8001`` and
``8002`` of the nodes) are free ones. Every ``jq`` filter must therefore work as printed, every
variable a step uses must have been set by an earlier step, and every request must succeed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ADMIN_KEY
from tests.support.live_server import LiveServer, free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```(sh|python)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: The node walkthrough's ports, replaced by free ones.
NODE_PORTS = ("8001", "8002")


def walkthrough_blocks(text: str) -> list[tuple[str, str]]:
    """The (language, body) of the blocks to run, in order: ```sh blocks not tagged
    ``no-test`` and ```python blocks tagged ``walkthrough``."""
    blocks = []
    for language, tag, body in _BLOCK.findall(text):
        tags = tag.split()
        runs = "no-test" not in tags if language == "sh" else "walkthrough" in tags
        if runs:
            blocks.append((language, body))
    return blocks


def shell_blocks(text: str) -> list[str]:
    """The ```sh blocks to run, in order (not those tagged ``no-test``)."""
    return [body for language, body in walkthrough_blocks(text) if language == "sh"]


def script(text: str, base_url: str, admin_key: str, node_ports: tuple[int, int]) -> str:
    """One bash script of the walkthrough blocks, with the reader's substitutions only."""
    parts = []
    for language, body in walkthrough_blocks(text):
        if language == "sh":
            body = re.sub(r"^ADMIN=pf_\.\.\.", f"ADMIN={admin_key}", body, flags=re.MULTILINE)
            parts.append(body)
        else:
            body = re.sub(
                r'^ADMIN = "pf_\.\.\."', f'ADMIN = "{admin_key}"', body, flags=re.MULTILINE
            )
            assert "\nPY\n" not in body
            parts.append(f".venv/bin/python - <<'PY'\n{body}PY\n")
    out = "\n".join(parts).replace("http://127.0.0.1:8000", base_url)
    for old, new in zip(NODE_PORTS, node_ports, strict=True):
        out = re.sub(rf"\b{old}\b", str(new), out)
    return 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n' + out


def test_the_readme_has_the_walkthroughs_it_promises() -> None:
    readme = README.read_text(encoding="utf-8")
    blocks = shell_blocks(readme)
    assert len(blocks) >= 3
    text = "\n".join(blocks)
    for step in (
        "/sites/me/keys/rotate",
        "/datasets",
        "/fits",
        "/predict",
        "/studies",
        "/contributions",
        "/federated-fits",
        "/aggregations",
    ):
        assert step in text, step
    assert "jq '{label, features}'" not in text  # a syntax error in jq 1.6
    # the client's sections and the site-node walkthrough run too
    for step in ("/offers", "privfit agent", "privfit create-site", "privfit-client"):
        assert step in text, step
    assert any(lang == "python" and "Client(" in body for lang, body in walkthrough_blocks(readme))


def test_the_readme_calls_privfit_where_a_checkout_has_it() -> None:
    """`make run` installs the commands into .venv/bin, which is not on a reader's PATH."""
    for body in shell_blocks(README.read_text(encoding="utf-8")):
        for line in body.splitlines():
            for command in re.findall(
                r"(\S*)privfit(?:-client)? (?:migrate|serve|agent|create-site|upload)", line
            ):
                assert command.endswith(".venv/bin/"), line


def test_the_readme_offers_only_what_the_spec_allows() -> None:
    """Every δ cap a walkthrough grants or offers is within the Adult spec's δ budget."""
    readme = README.read_text(encoding="utf-8")
    cap = json.loads((ROOT / "datasets" / "adult" / "spec.json").read_text())["budget"]["delta"]
    text = "\n".join(shell_blocks(readme))
    caps = [float(v) for v in re.findall(r'delta_cap\\?"?:? *([0-9.e-]+)', text)]
    caps += [float(v) for v in re.findall(r"--delta-cap ([0-9.e-]+)", text)]
    assert len(caps) >= 5, caps
    assert all(0 <= c <= cap for c in caps), (caps, cap)


def test_the_quick_start_says_how_to_choose_the_port() -> None:
    quick_start = README.read_text(encoding="utf-8").split("## Quick start", 1)[1]
    quick_start = quick_start.split("\n## ", 1)[0]
    assert "PRIVFIT_PORT=" in quick_start
    assert "--port" in quick_start


def end_session(process: subprocess.Popen[str], grace: float = 60.0) -> None:
    """Stop what the script left running in its session, and wait until all of it has ended.

    A node's agent ends after its current long poll (up to 20 s) once told to stop; the
    coordinator, stopped next, would otherwise still be serving that poll when the test's
    server fixture gives up on it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        process.kill()
        process.communicate()


# Heavy tier (issue 27 §5): minutes of real processes (a server, two nodes and their agents,
# every README step in order) whose steps the API, client and node tests cover one by one; what
# only this test checks is that the README's commands run as printed, which CI checks in
# `make test-heavy`. The README's promises above stay in the default tier.
@pytest.mark.heavy
@pytest.mark.skipif(shutil.which("jq") is None, reason="the README's walkthrough needs jq")
def test_the_readme_walkthrough_runs_as_written(live_server: LiveServer, tmp_path: Path) -> None:
    assert live_server.admin_headers["Authorization"] == f"Bearer {ADMIN_KEY}"
    for name in ("datasets", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the virtualenv running the tests
    node_ports = (free_port(), free_port())
    assert node_ports[0] != node_ports[1]
    commands = script(
        README.read_text(encoding="utf-8"), live_server.base_url, ADMIN_KEY, node_ports
    )
    (tmp_path / "readme.sh").write_text(commands, encoding="utf-8")
    # a reader's shell: no PrivFit setting of the test run leaks in
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVFIT_")}
    env.update(
        PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'client' / 'src'}",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    # a session of its own, so that the nodes it starts end with the test even if it fails
    process = subprocess.Popen(
        ["bash", "readme.sh"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=900)
    finally:
        end_session(process)
    assert process.returncode == 0, out[-3000:] + "\n--- stderr ---\n" + err[-3000:]
    context = out[-4000:] + "\n--- stderr ---\n" + err[-2000:]
    assert out.count('"St. Mary\'s Hospital"') == 2, context  # read with both keys
    assert '"predictions"' in out, context
    assert "\n1\n3\n" in out, context  # ε spent and remaining after the first fit
    assert out.count('"dataset"\n') == 2, context  # both grants
    assert out.count('"model"\n') == 2, context  # both model contributions
    # the federated fit, the average, the command line's fit and the fit over the two nodes
    assert out.count("succeeded\n") == 4, context
    assert "\n3.0\n" in out, context  # the Python client's budget after its fit
    assert "probability" in out, context  # its predictions
    assert (tmp_path / "out.csv").read_text().splitlines()[0].endswith("probability")
    assert (tmp_path / "model.json").stat().st_size > 0
    assert (tmp_path / "budget.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "spend.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert out.rstrip().endswith("succeeded\n1"), context  # the node fit, the node's ε spent
    # each node printed its own admin key at its first start, as the README says
    for n in (1, 2):
        assert "PrivFit generated the admin API key" in (tmp_path / f"node-{n}.log").read_text()
