"""The committed OpenAPI document matches the app, and documents every operation well."""

from __future__ import annotations

from typing import Any

import pytest

from service.openapi import DEFAULT_PATH, live_spec, render

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return live_spec()


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def test_committed_spec_is_up_to_date(spec: dict[str, Any]) -> None:
    committed = DEFAULT_PATH.read_text(encoding="utf-8") if DEFAULT_PATH.is_file() else ""
    assert committed == render(spec), (
        f"{DEFAULT_PATH} differs from the app's OpenAPI document: run `make openapi` and commit it"
    )


def test_every_operation_is_documented(spec: dict[str, Any]) -> None:
    ops = operations(spec)
    assert len(ops) >= 9
    for path, method, operation in ops:
        label = f"{method.upper()} {path}"
        assert operation.get("summary"), label
        assert operation.get("description"), label
        assert operation.get("tags"), label
        tag = operation["tags"][0]
        assert operation["operationId"].startswith(f"{tag}-"), label
        assert operation.get("x-privfit-access") in {
            "admin",
            "site",
            "owner",
            "any",
            "public",
        }, label
        responses = operation["responses"]
        assert any(code.startswith("2") for code in responses), label
        assert "500" in responses, label
        for code, response in responses.items():
            if int(code) >= 400:
                content = response["content"]
                assert list(content) == ["application/problem+json"], (label, code)
                media = content["application/problem+json"]
                assert media["schema"] == {"$ref": "#/components/schemas/Problem"}, (label, code)
                assert media["example"]["status"] == int(code), (label, code)


def test_keyed_operations_declare_bearer_auth_and_its_errors(spec: dict[str, Any]) -> None:
    scheme = spec["components"]["securitySchemes"]["ApiKey"]
    assert scheme == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "pf_<prefix>_<secret>",
        "description": scheme["description"],
    }
    for path, method, operation in operations(spec):
        label = f"{method.upper()} {path}"
        access = operation["x-privfit-access"]
        if access == "public":
            assert "security" not in operation, label
            continue
        assert operation["security"] == [{"ApiKey": []}], label
        assert "401" in operation["responses"], label
        if access in {"admin", "site"}:
            assert "403" in operation["responses"], label
        if access == "owner":
            # one site resource: to another site and to the admin key it is a 404
            assert "404" in operation["responses"], label
            assert "Owner or admin" not in operation["description"], label
            assert "admin sees" not in operation["description"], label


def test_operations_with_input_document_422(spec: dict[str, Any]) -> None:
    for path, method, operation in operations(spec):
        has_input = operation.get("parameters") or operation.get("requestBody")
        if has_input:
            assert "422" in operation["responses"], f"{method.upper()} {path}"
        if operation.get("requestBody"):
            assert "413" in operation["responses"], f"{method.upper()} {path}"
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_schemas_have_examples(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    for name in ("SiteCreate", "SiteRead", "SiteWithKey", "IssuedKeyRead", "AuditEventRead"):
        assert schemas[name].get("examples"), name
