"""The production image's Dockerfile, checked by parsing it (no Docker engine on CI machines)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuations joined, spaces squeezed."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            result.append((keyword.upper(), " ".join(rest.split())))
    return result


@pytest.fixture(scope="module")
def parsed() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text(encoding="utf-8"))


def args_of(parsed: list[tuple[str, str]], keyword: str) -> list[str]:
    return [rest for key, rest in parsed if key == keyword]


def test_slim_python_base_pinned_by_digest(parsed: list[tuple[str, str]]) -> None:
    (base,) = args_of(parsed, "FROM")
    assert re.fullmatch(r"python:3\.(1[1-9])-slim(-\w+)?@sha256:[0-9a-f]{64}", base), base


def test_dependencies_come_from_the_hashed_lock(parsed: list[tuple[str, str]]) -> None:
    copies = args_of(parsed, "COPY")
    runs = args_of(parsed, "RUN")
    assert "requirements.lock ./" in copies
    lock_install = next(i for i, run in enumerate(runs) if "-r requirements.lock" in run)
    assert "--require-hashes" in runs[lock_install]
    assert "--no-deps" in runs[lock_install]
    # The service itself is installed without resolving anything the lock did not pin.
    assert any("pip install --no-deps ." in run for run in runs)
    assert not any(re.search(r"pip install (?!--)", run) for run in runs)
    # Dependencies are installed before the code is copied, so code edits keep the layer.
    order = [key + " " + rest for key, rest in parsed]
    first_install = next(i for i, line in enumerate(order) if "requirements.lock" in line)
    code_copy = next(i for i, line in enumerate(order) if line.startswith("COPY service"))
    assert first_install < code_copy


def _requirement_name(requirement: str) -> str:
    name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lock = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    pinned = {
        _requirement_name(m.group(1)): m.group(2)
        for m in re.finditer(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+) \\$", lock, re.MULTILINE)
    }
    extras = pyproject["project"]["optional-dependencies"]
    for requirement in [*pyproject["project"]["dependencies"], *extras["redis"]]:
        assert _requirement_name(requirement) in pinned, f"{requirement} is not in the lock"
    # The image can share rate-limit counters between replicas (PRIVFIT_RATE_LIMIT_STORAGE).
    assert "redis" in pinned
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock.split("\n", 1)[1])
    for entry in entries:
        if entry.strip():
            assert "--hash=sha256:" in entry, entry.splitlines()[0]


def test_runs_as_a_non_root_user(parsed: list[tuple[str, str]]) -> None:
    users = args_of(parsed, "USER")
    assert users
    assert users[-1] not in {"root", "0", "0:0"}
    assert "useradd" in " ".join(args_of(parsed, "RUN"))
    # USER comes after the last RUN that needs root.
    keys = [key for key, _ in parsed]
    assert max(i for i, k in enumerate(keys) if k == "USER") > max(
        i for i, k in enumerate(keys) if k == "RUN"
    )


def test_exposes_8000(parsed: list[tuple[str, str]]) -> None:
    assert "8000" in " ".join(args_of(parsed, "EXPOSE")).split()


def test_healthcheck_hits_healthz_without_curl(parsed: list[tuple[str, str]]) -> None:
    (check,) = args_of(parsed, "HEALTHCHECK")
    assert "/healthz" in check
    assert "curl" not in check
    assert "wget" not in check
    command = json.loads(check[check.index("CMD") + 3 :].strip())
    assert command[:2] == ["python", "-c"]
    compile(command[2], "<healthcheck>", "exec")  # the inline script is valid Python


def test_entrypoint_migrates_then_serves(parsed: list[tuple[str, str]]) -> None:
    (entrypoint,) = args_of(parsed, "ENTRYPOINT")
    (program,) = json.loads(entrypoint)
    assert any(program in copy and "entrypoint.sh" in copy for copy in args_of(parsed, "COPY"))
    script = [
        shlex.split(line)
        for line in ENTRYPOINT.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    migrate = script.index(["privfit", "migrate"])
    serve = script.index(["exec", "privfit", "serve"])
    assert migrate < serve
    assert ["set", "-eu"] in script[:migrate]
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True)


def test_environment_configures_production(parsed: list[tuple[str, str]]) -> None:
    env = " ".join(args_of(parsed, "ENV"))
    assert "PRIVFIT_ENVIRONMENT=prod" in env
    assert "PRIVFIT_HOST=0.0.0.0" in env
    assert "PYTHONUNBUFFERED=1" in env


def test_compose_example_runs_api_with_postgres() -> None:
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert re.search(r"^  api:\n    build: \.", compose, re.MULTILINE)
    assert re.search(r"^  postgres:\n    image: postgres:", compose, re.MULTILINE)
    assert "PRIVFIT_DATABASE_URL: postgresql+psycopg://" in compose
    # No password in the file or the environment: a secret file (tests/test_compose.py).
    assert "POSTGRES_PASSWORD_FILE: /run/secrets/postgres_password" in compose
    assert "condition: service_healthy" in compose


def test_parser_handles_continuations() -> None:
    parsed = instructions("FROM a\n# note\nRUN one \\\n    two\nUSER x\n")
    assert parsed == [("FROM", "a"), ("RUN", "one two"), ("USER", "x")]
