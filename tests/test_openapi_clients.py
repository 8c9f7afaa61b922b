"""The committed OpenAPI document is usable by standard tools: every ``$ref`` resolves, and a
maintained generator (openapi-python-client) builds a client from it without warnings, upload
operation included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.openapi import DEFAULT_PATH


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"external reference {ref}"
    node: Any = document
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict), f"{ref} does not resolve"
        assert part in node, f"{ref} does not resolve"
        node = node[part]
    return node


def test_every_reference_in_the_committed_document_resolves() -> None:
    document = json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))
    refs = set(_refs(document))
    assert "#/components/schemas/DatasetCreate" in refs
    for ref in sorted(refs):
        _resolve(document, ref)


def test_the_upload_spec_part_is_a_typed_schema_with_an_example() -> None:
    document = json.loads(DEFAULT_PATH.read_text(encoding="utf-8"))
    spec_part = document["paths"]["/v1/datasets"]["post"]["requestBody"]["content"][
        "multipart/form-data"
    ]["schema"]["properties"]["spec"]
    schema = _resolve(document, spec_part["$ref"])
    assert schema["type"] == "object"
    assert {"name", "label", "features", "budget"} <= set(schema["required"])
    assert schema["examples"][0]["label"]["negative"]


def test_openapi_python_client_generates_every_operation_without_warnings(
    tmp_path: Path,
) -> None:
    generator = Path(sys.executable).with_name("openapi-python-client")
    if not generator.exists():
        pytest.skip("openapi-python-client (a dev dependency) is not installed")
    env = {**os.environ, "PATH": f"{generator.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(generator), "generate", "--path", str(DEFAULT_PATH), "--output-path", "generated"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Warning" not in output, output
    assert "Could not" not in output, output
    modules = {p.stem for p in (tmp_path / "generated").rglob("*.py")}
    assert "datasets_create_dataset" in modules
    shutil.rmtree(tmp_path / "generated")
