"""The README's shell walkthrough, run as written against a server the test starts.

Every ```sh block of README.md is extracted in order and executed by one bash process with
``set -euo pipefail`` (blocks tagged ```sh no-test — `make run`, Docker, createdb — are
skipped). Two substitutions make it runnable unattended, and they are the only ones: the admin
key the reader pastes (``ADMIN=pf_...``) is the server's, and ``127.0.0.1:8000`` is the port the
server was started on. Every ``jq`` filter must therefore work as printed, every variable a step
uses must have been set by an earlier step, and every request must succeed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ADMIN_KEY
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```sh([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def shell_blocks(text: str) -> list[str]:
    """The ```sh blocks to run, in order (not those tagged ``no-test``)."""
    return [body for tag, body in _BLOCK.findall(text) if "no-test" not in tag.split()]


def script(text: str, base_url: str, admin_key: str) -> str:
    blocks = shell_blocks(text)
    body = "\n".join(blocks)
    body = re.sub(r"^ADMIN=pf_\.\.\.", f"ADMIN={admin_key}", body, flags=re.MULTILINE)
    body = body.replace("http://127.0.0.1:8000", base_url)
    return 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n' + body


def test_the_readme_has_the_walkthroughs_it_promises() -> None:
    blocks = shell_blocks(README.read_text(encoding="utf-8"))
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


@pytest.mark.skipif(shutil.which("jq") is None, reason="the README's walkthrough needs jq")
def test_the_readme_walkthrough_runs_as_written(live_server: LiveServer, tmp_path: Path) -> None:
    assert live_server.admin_headers["Authorization"] == f"Bearer {ADMIN_KEY}"
    for name in ("datasets", "benchmarks", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    commands = script(README.read_text(encoding="utf-8"), live_server.base_url, ADMIN_KEY)
    (tmp_path / "readme.sh").write_text(commands, encoding="utf-8")
    result = subprocess.run(
        ["bash", "readme.sh"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        result.stdout[-3000:] + "\n--- stderr ---\n" + result.stderr[-3000:]
    )
    out = result.stdout
    context = out[-4000:] + "\n--- stderr ---\n" + result.stderr[-2000:]
    assert out.count('"St. Mary\'s Hospital"') == 2, context  # read with both keys
    assert '"predictions"' in out, context
    assert "\n1\n3\n" in out, context  # ε spent and remaining after the first fit
    assert out.count('"dataset"\n') == 2, context  # both grants
    assert out.count('"model"\n') == 2, context  # both model contributions
    assert out.count("succeeded\n") == 2, context  # the federated fit and the average
