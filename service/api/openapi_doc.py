"""The OpenAPI document: metadata, tag descriptions and post-processing of error responses."""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel

from service.api.errors import problem_example, problem_responses
from service.api.schemas.datasets import DatasetCreate
from service.api.schemas.problem import PROBLEM_MEDIA_TYPE

__all__ = ["DESCRIPTION", "TAGS", "build_openapi", "operation_id"]

DESCRIPTION = """\
PrivFit fits **differentially private linear classifiers** for organisations that may not share
raw data. Sites upload datasets, ask for models under a privacy budget, and pool what they learn;
every ε spent is recorded in a ledger.

**Authorization.** Every `/v1` operation needs an API key, sent as
`Authorization: Bearer <key>`. Click **Authorize** above and paste a key (without `Bearer `):

* the **admin key** (`PRIVFIT_ADMIN_KEY`, or the key printed once at the first start) creates
  and lists sites;
* a **site key** (returned once by `POST /v1/sites`, rotatable) acts for that site.

**Errors** are [RFC 9457](https://www.rfc-editor.org/rfc/rfc9457) `application/problem+json`
documents with a stable `type` URI and a `request_id` (also in the `X-Request-ID` header).
"""

#: Tag order and descriptions for the docs; later resources add theirs here.
TAGS: list[dict[str, str]] = [
    {"name": "sites", "description": "Sites (organisations) and their API keys."},
    {
        "name": "datasets",
        "description": "Upload a dataset with public bounds and a budget; read its ledger.",
    },
    {"name": "fits", "description": "Ask for a DP fit (or a dry-run quote) on a dataset."},
    {"name": "jobs", "description": "Follow or cancel background fits."},
    {
        "name": "models",
        "description": "Models with their privacy record: read, predict, export, upload.",
    },
    {
        "name": "evaluations",
        "description": "Private evaluations: a model's accuracy, precision, recall, F1 and ROC "
        "on a private dataset, released with differential privacy and charged to its budget.",
    },
    {
        "name": "plans",
        "description": "The privacy–utility planner: what a mechanism would give at each ε, "
        "from public quantities and public reference data; spends nothing.",
    },
    {
        "name": "studies",
        "description": "Studies: sites contribute models or dataset grants; the coordinator "
        "aggregates them into a model every member reads.",
    },
    {"name": "audit", "description": "The audit log of security-relevant events (admin)."},
    {"name": "ops", "description": "Liveness, readiness and Prometheus metrics (no key)."},
]


def operation_id(route: APIRoute) -> str:
    """Stable operation ids: ``{first tag}-{handler name}``, e.g. ``sites-create_site``."""
    tag = route.tags[0] if route.tags else "default"
    return f"{tag}-{route.name}"


def _uses_problem(content: dict[str, Any]) -> bool:
    schema = content.get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref", "").endswith("/Problem"))


def _fix_error_responses(spec: dict[str, Any]) -> None:
    problem_500 = problem_responses(500)[500]
    for path, item in spec.get("paths", {}).items():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses: dict[str, Any] = operation["responses"]
            responses.setdefault(
                "500",
                {
                    "description": problem_500["description"],
                    "content": {
                        PROBLEM_MEDIA_TYPE: {
                            "schema": {"$ref": "#/components/schemas/Problem"},
                            "example": problem_example(500, path),
                        }
                    },
                },
            )
            for code, response in responses.items():
                content = response.get("content", {})
                if int(code) >= 400 and _uses_problem(content):
                    schema = content.pop("application/json")["schema"]
                    content.setdefault(PROBLEM_MEDIA_TYPE, {})["schema"] = schema
                    example = content[PROBLEM_MEDIA_TYPE].get("example")
                    if isinstance(example, dict):
                        example["instance"] = path


#: Request models that no route declares as a body but the document references (the
#: multipart upload's ``spec`` part is read by hand, so FastAPI never sees its model).
_EXTRA_SCHEMAS: tuple[type[BaseModel], ...] = (DatasetCreate,)


def _add_extra_schemas(spec: dict[str, Any]) -> None:
    """Define every model of ``_EXTRA_SCHEMAS`` (and the models it uses) under
    ``components/schemas`` so that every ``$ref`` in the document resolves."""
    schemas: dict[str, Any] = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in _EXTRA_SCHEMAS:
        schema = model.model_json_schema(
            ref_template="#/components/schemas/{model}", mode="validation"
        )
        for name, definition in schema.pop("$defs", {}).items():
            schemas.setdefault(name, definition)
        schemas.setdefault(model.__name__, schema)


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (cached on the app)."""
    if app.openapi_schema is None:
        spec = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            tags=app.openapi_tags,
        )
        spec = copy.deepcopy(spec)
        _fix_error_responses(spec)
        _add_extra_schemas(spec)
        app.openapi_schema = spec
    return app.openapi_schema
