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
from service.api.schemas.fits import FitCreate
from service.api.schemas.options import MechanismRequest
from service.api.schemas.plans import PlanCreate
from service.api.schemas.problem import PROBLEM_MEDIA_TYPE

__all__ = ["DESCRIPTION", "TAGS", "build_openapi", "operation_id"]

DESCRIPTION = """\
PrivFit fits **differentially private linear classifiers** for organisations that may not share
raw data. Sites upload datasets, ask for models under a privacy budget, and pool what they learn;
every ε spent is recorded in a ledger.

**Authorization.** Every `/v1` operation needs an API key, sent in the header
`Authorization: Bearer <key>`:

* the **admin key** (`PRIVFIT_ADMIN_KEY`, or the key printed once at the first start) creates,
  lists and deactivates sites, rotates their keys and reads the audit log; it reaches no site's
  data (another site's resource, and every site resource for the admin key, is a `404`, as for
  an unknown id; lists of site data are a `403` for it);
* a **site key** (returned once by `POST /v1/sites`, rotatable) acts for that site.

How to send it depends on where you read this:

* **Swagger UI** (`/docs`): click the **Authorize** button at the top right, paste the key
  alone (without `Bearer `), then use **Try it out** on an operation.
* **ReDoc** (`/redoc`) only documents the API and sends no request: call it from a shell, e.g.
  `curl -H "Authorization: Bearer $KEY" http://127.0.0.1:8000/v1/sites/me`, from the Python
  client (`privfit_client.Client(url, key)`) or its command line (`privfit-client`), or from
  Swagger UI.

**Rate limits.** Repeated failed authentications from one address or with one key prefix, and
expensive operations (dataset and model uploads, fits, study contributions, aggregations,
federated fits, predictions) beyond the operator's limits, are answered `429` with a
`Retry-After` header.

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
    {
        "name": "nodes",
        "description": "Site nodes: datasets kept on a member's own PrivFit, offered to a "
        "coordinator's study, and the tasks of federated fits run there (issue 15).",
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
            if "security" in operation:
                responses.setdefault("429", _rate_limited_response(path))
            for code, response in responses.items():
                content = response.get("content", {})
                if int(code) >= 400 and _uses_problem(content):
                    schema = content.pop("application/json")["schema"]
                    content.setdefault(PROBLEM_MEDIA_TYPE, {})["schema"] = schema
                    example = content[PROBLEM_MEDIA_TYPE].get("example")
                    if isinstance(example, dict):
                        example["instance"] = path


def _rate_limited_response(path: str) -> dict[str, Any]:
    """429 with ``Retry-After``: any operation that checks a key (failed-authentication limit),
    including the expensive ones (their own limit)."""
    documented = problem_responses(429)[429]
    return {
        "description": documented["description"],
        "headers": {
            "Retry-After": {
                "description": "Seconds until the limit lets this client or key try again.",
                "schema": {"type": "integer", "minimum": 1},
            }
        },
        "content": {
            PROBLEM_MEDIA_TYPE: {
                "schema": {"$ref": "#/components/schemas/Problem"},
                "example": problem_example(429, path),
            }
        },
    }


#: Request models that no route declares as a body but the document references (the
#: multipart upload's ``spec`` part is read by hand, so FastAPI never sees its model).
_EXTRA_SCHEMAS: tuple[type[BaseModel], ...] = (DatasetCreate,)
#: Request bodies whose ``params`` are typed per mechanism (``_type_mechanism_options``).
_MECHANISM_REQUESTS: tuple[type[MechanismRequest], ...] = (FitCreate, PlanCreate)


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


def _type_mechanism_options(spec: dict[str, Any]) -> None:
    """Replace each request body with a ``mechanism`` and its ``params``
    (:class:`~service.api.schemas.options.MechanismRequest`) by the union of one variant per
    registered mechanism, each with that mechanism's typed options."""
    schemas: dict[str, Any] = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in _MECHANISM_REQUESTS:
        if model.__name__ not in schemas:
            continue
        union, definitions = model.union_schema("#/components/schemas/{model}")
        for name, definition in definitions.items():
            schemas.setdefault(name, definition)
        schemas[model.__name__] = union


def _link(operation_id: str, description: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": operation_id, "description": description, "parameters": parameters}


_FIRST_ITEM = "$response.body#/items/0/id"
_JOB_LINKS = {
    "GetJob": _link("jobs-get_job", "Follow the job.", job_id="$response.body#/id"),
    "CancelJob": _link("jobs-cancel_job", "Cancel the job.", job_id="$response.body#/id"),
}

#: OpenAPI links: how the id one operation returns feeds the next, so that clients (and API
#: fuzzers such as schemathesis' stateful phase) can walk upload → fit → job → model and
#: study → contribution → aggregation. Keyed by (operationId, status).
LINKS: dict[tuple[str, str], dict[str, Any]] = {
    ("datasets-create_dataset", "201"): {
        "GetDataset": _link("datasets-get_dataset", "Read it.", dataset_id="$response.body#/id"),
        "GetBudget": _link(
            "datasets-get_dataset_budget", "Its ledger.", dataset_id="$response.body#/id"
        ),
        "CreateFit": _link("fits-create_fit", "Fit on it.", dataset_id="$response.body#/id"),
    },
    ("datasets-list_datasets", "200"): {
        "GetDataset": _link("datasets-get_dataset", "Read the first.", dataset_id=_FIRST_ITEM),
        "CreateFit": _link("fits-create_fit", "Fit on the first.", dataset_id=_FIRST_ITEM),
        "GetBudget": _link("datasets-get_dataset_budget", "Its ledger.", dataset_id=_FIRST_ITEM),
    },
    ("fits-create_fit", "202"): _JOB_LINKS,
    ("fits-create_fit", "201"): {
        **_JOB_LINKS,
        "GetModel": _link("models-get_model", "The model.", model_id="$response.body#/model_id"),
    },
    ("jobs-list_jobs", "200"): {
        "GetJob": _link("jobs-get_job", "Follow the first.", job_id=_FIRST_ITEM),
    },
    ("jobs-get_job", "200"): {
        "GetModel": _link(
            "models-get_model",
            "The job's model, once it succeeded.",
            model_id="$response.body#/model_id",
        ),
    },
    ("models-list_models", "200"): {
        "GetModel": _link("models-get_model", "Read the first.", model_id=_FIRST_ITEM),
        "Predict": _link("models-predict", "Predict with the first.", model_id=_FIRST_ITEM),
        "Export": _link("models-export_model", "Export the first.", model_id=_FIRST_ITEM),
    },
    ("models-upload_model", "201"): {
        "GetModel": _link("models-get_model", "Read it.", model_id="$response.body#/id"),
        "Predict": _link("models-predict", "Predict with it.", model_id="$response.body#/id"),
    },
    ("models-get_model", "200"): {
        "Predict": _link("models-predict", "Predict with it.", model_id="$response.body#/id"),
        "Export": _link("models-export_model", "Export it.", model_id="$response.body#/id"),
    },
    ("studies-create_study", "201"): {
        "GetStudy": _link("studies-get_study", "Read it.", study_id="$response.body#/id"),
        "Contribute": _link(
            "studies-add_contribution", "Contribute to it.", study_id="$response.body#/id"
        ),
        "Aggregate": _link(
            "studies-create_aggregation", "Aggregate it.", study_id="$response.body#/id"
        ),
        "FederatedFit": _link(
            "studies-create_federated_fit", "Fit across it.", study_id="$response.body#/id"
        ),
    },
    ("studies-list_studies", "200"): {
        "GetStudy": _link("studies-get_study", "Read the first.", study_id=_FIRST_ITEM),
        "Contribute": _link("studies-add_contribution", "Contribute.", study_id=_FIRST_ITEM),
        "Aggregate": _link("studies-create_aggregation", "Aggregate.", study_id=_FIRST_ITEM),
        "FederatedFit": _link(
            "studies-create_federated_fit", "Fit across it.", study_id=_FIRST_ITEM
        ),
    },
    ("studies-create_aggregation", "202"): _JOB_LINKS,
    ("studies-create_federated_fit", "202"): _JOB_LINKS,
    ("sites-create_site", "201"): {
        "GetSite": _link("sites-get_site", "Read it.", site_id="$response.body#/site/id"),
    },
}


def _add_links(spec: dict[str, Any]) -> None:
    """Declare :data:`LINKS` on the responses they start from."""
    for item in spec.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses: dict[str, Any] = operation["responses"]
            for (operation_id, status), links in LINKS.items():
                if operation.get("operationId") == operation_id and status in responses:
                    responses[status]["links"] = copy.deepcopy(links)


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
        _type_mechanism_options(spec)
        _add_links(spec)
        app.openapi_schema = spec
    return app.openapi_schema
