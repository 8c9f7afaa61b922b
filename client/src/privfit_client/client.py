"""``Client``: one PrivFit server, one API key, typed calls for every resource.

from privfit_client import Client

with Client("http://127.0.0.1:8000", key) as pf:
    dataset = pf.upload("adult.csv", "datasets/adult/spec.json")
    job = pf.fit(dataset.id, "objective_perturbation", epsilon=1.0, regularization=1e-3)
    model = job.wait(progress=True).model()
    predictions = pf.predict(model.id, rows)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeVar, overload

import httpx
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from privfit_client._http import RetryPolicy, Session
from privfit_client._io import DataSource, SpecSource, is_dataframe, load_spec, open_data, records
from privfit_client.errors import PrivFitError, ValidationFailed
from privfit_client.jobs import MAX_WAIT, Job
from privfit_client.models import (
    AverageAggregationIn,
    BudgetRead,
    ContributionRead,
    DatasetGrantIn,
    DatasetList,
    DatasetRead,
    EvaluationCreate,
    EvaluationList,
    EvaluationQuoteRead,
    EvaluationRead,
    FeatureAggregationIn,
    FederatedFitCreate,
    FederatedQuoteRead,
    FitCreate,
    FitQuoteRead,
    IssuedKeyRead,
    JobList,
    JobRead,
    ModelContributionIn,
    ModelExportRead,
    ModelList,
    ModelRead,
    ModelSummary,
    ModelUpload,
    PlanCreate,
    PlanRead,
    PredictionRead,
    PredictRequest,
    PredictResponse,
    RegularizationCandidates,
    SiteCreate,
    SiteList,
    SiteRead,
    SiteWithKey,
    StudyCreate,
    StudyList,
    StudyRead,
    StudySpecIn,
    TransferAggregationIn,
)
from privfit_client.predictions import BINARY_COLUMNS, prediction_cells, prediction_columns

__all__ = ["PAGE_SIZE", "PREDICT_BATCH", "Client", "ExportFormat"]

_M = TypeVar("_M", bound=BaseModel)

#: Page size used to read whole lists (the API's maximum).
PAGE_SIZE: Final[int] = 200


def _max_rows() -> int:
    """The API's per-request row limit of ``POST /v1/models/{id}/predict``, from its schema."""
    for meta in PredictRequest.model_fields["rows"].metadata:
        if getattr(meta, "max_length", None):
            return int(meta.max_length)
    return 1000


#: Rows per predict request: the API's limit, read from the generated schema.
PREDICT_BATCH: Final[int] = _max_rows()

ExportFormat = Literal["json", "skops", "onnx"]
_Aggregation = AverageAggregationIn | FeatureAggregationIn | TransferAggregationIn
#: Fit and plan bodies are unions discriminated by ``mechanism`` (each variant's ``params`` are
#: that mechanism's typed options).
_FIT_CREATE: TypeAdapter[Any] = TypeAdapter(FitCreate)
_PLAN_CREATE: TypeAdapter[Any] = TypeAdapter(PlanCreate)


class _UncheckedBody(BaseModel):
    """A body the client's models refuse (an unknown mechanism or option), sent as given so
    that the server answers with its problem (a 422 naming the part)."""

    model_config = ConfigDict(extra="allow")


def _by_mechanism(adapter: TypeAdapter[Any], data: dict[str, Any]) -> BaseModel:
    """The variant of a union discriminated by ``mechanism`` for ``data``, else ``data``
    unchecked (the server is the judge)."""
    try:
        body: BaseModel = adapter.validate_python(data)
    except ValidationError:
        return _UncheckedBody(**data)
    return body


_AGGREGATIONS: Final[dict[str, type[_Aggregation]]] = {
    "average": AverageAggregationIn,
    "feature": FeatureAggregationIn,
    "transfer": TransferAggregationIn,
}


def _body(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_none=True)


#: The ``format`` of PrivFit's JSON export document.
EXPORT_FORMAT: Final = "privfit.model"


def upload_from_export(doc: ModelExportRead | Mapping[str, Any]) -> ModelUpload:
    """The ``POST /v1/models`` body of a PrivFit JSON export: its label, its preprocessing's
    features and row norm, its ``weights.coef`` (a vector, one row per class, or a regression
    model's vector in the label's [−1, 1] units) and its loss. Exports without weights
    (stacked models) or with a random projection cannot be uploaded (``ValueError``)."""
    data = doc.model_dump(mode="json") if isinstance(doc, ModelExportRead) else dict(doc)
    weights = data.get("weights")
    preprocessing = data.get("preprocessing") or {}
    if not isinstance(weights, Mapping) or data.get("projection_matrix") is not None:
        raise ValueError(
            "only a linear model over its public features (no random projection) uploads"
        )
    loss = data.get("loss")
    body: dict[str, Any] = {
        "label": data.get("label"),
        "features": preprocessing.get("features"),
        "row_norm": preprocessing.get("row_norm", "clip"),
        "weights": weights.get("coef"),
        "loss": loss if loss in ("logistic", "huber", "squared", "other") else "other",
    }
    return ModelUpload.model_validate(body)


class Client:
    """A session with a PrivFit server.

    ``base_url`` and ``key`` default to the ``PRIVFIT_URL`` and ``PRIVFIT_KEY`` environment
    variables. Use it as a context manager (or call :meth:`close`). ``retry`` tunes retries,
    ``transport`` replaces httpx's (for proxies, mounts or tests).
    """

    def __init__(
        self,
        base_url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = MAX_WAIT + 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url = base_url or os.environ.get("PRIVFIT_URL")
        if not url:
            raise PrivFitError("no server URL: pass base_url or set PRIVFIT_URL")
        url = url.rstrip("/").removesuffix("/v1")
        self.base_url = url
        self._session = Session(
            url,
            key if key is not None else os.environ.get("PRIVFIT_KEY"),
            timeout=timeout,
            retry=retry,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._session.close()

    # --- plumbing -----------------------------------------------------------------------

    def _get(self, path: str, model: type[_M], **params: Any) -> _M:
        response = self._session.request("GET", path, params=params or None)
        return model.model_validate_json(response.content)

    def _post(
        self,
        path: str,
        model: type[_M],
        body: BaseModel | None = None,
        *,
        idempotent: bool | None = None,
        idempotency_key: str | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> _M:
        response = self._session.request(
            "POST",
            path,
            json=None if body is None else _body(body),
            idempotent=idempotent,
            idempotency_key=idempotency_key,
            params=params,
            headers=headers,
        )
        return model.model_validate_json(response.content)

    def _pages(self, path: str, page: type[_M], **params: Any) -> Iterator[Any]:
        offset = 0
        while True:
            listing = self._get(path, page, limit=PAGE_SIZE, offset=offset, **params)
            items: list[Any] = listing.items  # type: ignore[attr-defined]
            yield from items
            offset += len(items)
            total = getattr(listing, "total", None)
            if not items or len(items) < PAGE_SIZE or (total is not None and offset >= total):
                return

    def _job(self, state: JobRead) -> Job:
        return Job(self, state)

    @staticmethod
    def _prefer(wait: float | None) -> dict[str, str] | None:
        return None if not wait else {"Prefer": f"wait={int(min(wait, MAX_WAIT))}"}

    # --- sites --------------------------------------------------------------------------

    def me(self) -> SiteRead:
        """The calling site."""
        return self._get("/v1/sites/me", SiteRead)

    def create_site(self, name: str) -> SiteWithKey:
        """Create a site (admin key); the answer holds its API key, shown only now."""
        return self._post("/v1/sites", SiteWithKey, SiteCreate(name=name))

    def sites(self) -> list[SiteRead]:
        """Every site (admin key)."""
        return list(self._pages("/v1/sites", SiteList))

    def site(self, site_id: str) -> SiteRead:
        """One site."""
        return self._get(f"/v1/sites/{site_id}", SiteRead)

    def rotate_key(self, site_id: str | None = None) -> IssuedKeyRead:
        """A new key for the calling site (or, with the admin key, for ``site_id``); the old
        key stops working at once. This client keeps using the key it was given."""
        path = "/v1/sites/me/keys/rotate" if site_id is None else f"/v1/sites/{site_id}/keys/rotate"
        return self._post(path, IssuedKeyRead)

    def deactivate_site(self, site_id: str) -> SiteRead:
        """Deactivate a site (admin key): every key of the site is revoked and none is issued
        again; its data is kept. Deactivating twice changes nothing."""
        return self._post(f"/v1/sites/{site_id}/deactivate", SiteRead)

    # --- datasets -----------------------------------------------------------------------

    def upload(self, data: DataSource, spec: SpecSource) -> DatasetRead:
        """Upload a dataset: ``data`` is a CSV or Parquet path, bytes, a binary file, or a
        pandas DataFrame (sent as Parquet); ``spec`` a mapping, JSON text or JSON file path.
        The file is streamed, with the spec first so the server parses while it receives."""
        spec_json = json.dumps(load_spec(spec)).encode()
        with open_data(data) as (filename, handle, media_type):

            def body() -> dict[str, Any]:
                return {
                    "files": [
                        ("spec", ("spec.json", spec_json, "application/json")),
                        ("file", (filename, handle, media_type)),
                    ]
                }

            response = self._session.request("POST", "/v1/datasets", body=body)
        return DatasetRead.model_validate_json(response.content)

    def datasets(self, *, include_deleted: bool = False) -> list[DatasetRead]:
        """The calling site's datasets, newest first."""
        return list(self._pages("/v1/datasets", DatasetList, include_deleted=include_deleted))

    def dataset(self, dataset_id: str) -> DatasetRead:
        """One dataset."""
        return self._get(f"/v1/datasets/{dataset_id}", DatasetRead)

    def delete_dataset(self, dataset_id: str) -> None:
        """Delete a dataset's content (its ledger is kept)."""
        self._session.request("DELETE", f"/v1/datasets/{dataset_id}")

    def budget(self, dataset_id: str) -> BudgetRead:
        """A dataset's budget: caps, spent, remaining and every charge."""
        return self._get(f"/v1/datasets/{dataset_id}/budget", BudgetRead)

    # --- fits and jobs ------------------------------------------------------------------

    def _fit_body(
        self,
        mechanism: str,
        epsilon: float | None,
        delta: float,
        loss: str | None,
        regularization: float | Sequence[float] | str,
        params: Mapping[str, Any] | None,
    ) -> BaseModel:
        if isinstance(regularization, str) and regularization != "auto":
            raise ValueError('regularization is a number, a list of candidates or "auto"')
        # the body's model is the variant of the union FitCreate named by ``mechanism``,
        # whose ``params`` are that mechanism's typed options
        return _by_mechanism(
            _FIT_CREATE,
            {
                "mechanism": mechanism,
                "epsilon": epsilon,
                "delta": delta,
                "loss": loss,
                "regularization": (
                    "auto"
                    if isinstance(regularization, str)
                    else regularization
                    if isinstance(regularization, (int, float))
                    else RegularizationCandidates(candidates=[float(c) for c in regularization])
                ),
                "params": dict(params or {}),
            },
        )

    def fit(
        self,
        dataset_id: str,
        mechanism: str = "objective_perturbation",
        *,
        epsilon: float | None,
        regularization: float | Sequence[float] | str = "auto",
        delta: float = 0.0,
        loss: str | None = None,
        params: Mapping[str, Any] | None = None,
        wait: float | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Charge the dataset's budget and queue a fit; returns the job (``job.wait()``).

        ``regularization="auto"`` (the default) lets the service choose λ from public
        quantities (n, d, ε, δ, the loss and the mechanism) at no privacy cost; the model's
        record shows the rule and the value. ``mechanism="auto"`` lets PrivFit choose the
        mechanism (and λ) from public quantities, at no cost; ``job.params["auto"]`` says why.
        Every private fit's ``job.warnings`` may hold ``below_majority_baseline``.
        ``loss=None`` (the default) is the dataset's task's first: ``logistic`` for class
        labels (binary or multi-class), ``squared`` for a numeric label.

        A list of ``regularization`` values asks PrivFit to choose one privately within the
        same (ε, δ) (the model's privacy record names the choice); for ``dp_sgd``,
        ``params={"eta": {"candidates": [...]}}`` does the same for the step size, alone or
        over the grid λ × η (at most 10 points).

        ``wait`` (seconds, at most 30) asks the server to answer once the job has ended.
        Retries reuse one idempotency key, so the budget is charged once.
        """
        body = self._fit_body(mechanism, epsilon, delta, loss, regularization, params)
        state = self._post(
            f"/v1/datasets/{dataset_id}/fits",
            JobRead,
            body,
            idempotency_key=idempotency_key,
            headers=self._prefer(wait),
        )
        return self._job(state)

    def quote_fit(
        self,
        dataset_id: str,
        mechanism: str = "objective_perturbation",
        *,
        epsilon: float | None,
        regularization: float | Sequence[float] | str = "auto",
        delta: float = 0.0,
        loss: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> FitQuoteRead:
        """The dry run of :meth:`fit`: exact cost, expected noise, remaining budget; spends
        nothing."""
        body = self._fit_body(mechanism, epsilon, delta, loss, regularization, params)
        return self._post(
            f"/v1/datasets/{dataset_id}/fits",
            FitQuoteRead,
            body,
            idempotent=True,
            params={"dry_run": "true"},
        )

    # --- private evaluation and planning -------------------------------------------

    def evaluate(
        self,
        model_id: str,
        dataset_id: str,
        *,
        epsilon: float,
        wait: float | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Charge ε to ``dataset_id``'s budget and queue a private evaluation of the model;
        once the job has succeeded, :meth:`evaluation` with the job's id reads the result."""
        state = self._post(
            f"/v1/models/{model_id}/evaluations",
            JobRead,
            EvaluationCreate(dataset_id=dataset_id, epsilon=epsilon),
            idempotency_key=idempotency_key,
            headers=self._prefer(wait),
        )
        return self._job(state)

    def quote_evaluation(
        self, model_id: str, dataset_id: str, *, epsilon: float
    ) -> EvaluationQuoteRead:
        """The dry run of :meth:`evaluate`; spends nothing."""
        return self._post(
            f"/v1/models/{model_id}/evaluations",
            EvaluationQuoteRead,
            EvaluationCreate(dataset_id=dataset_id, epsilon=epsilon),
            idempotent=True,
            params={"dry_run": "true"},
        )

    def evaluation(self, evaluation_id: str) -> EvaluationRead:
        """A released private evaluation (its id is its job's id)."""
        return self._get(f"/v1/evaluations/{evaluation_id}", EvaluationRead)

    def evaluations(self, model_id: str) -> list[EvaluationRead]:
        """The calling site's evaluations of a model, newest first."""
        return list(self._pages(f"/v1/models/{model_id}/evaluations", EvaluationList))

    def plan(
        self,
        dataset_id: str,
        mechanism: str = "objective_perturbation",
        *,
        epsilons: Sequence[float],
        regularizations: Sequence[float] = (1e-3,),
        reference_dataset_id: str | None = None,
        repeats: int = 10,
        target_accuracy: float | None = None,
        target_probability: float = 0.9,
        delta: float = 0.0,
        loss: str = "logistic",
        params: Mapping[str, Any] | None = None,
        seed: int | None = None,
        svg: bool = False,
    ) -> PlanRead | str:
        """The privacy–utility plan (spends nothing); with ``svg=True`` the picture as SVG."""
        body = _by_mechanism(
            _PLAN_CREATE,
            {
                "mechanism": mechanism,
                "epsilons": list(epsilons),
                "regularizations": list(regularizations),
                "reference_dataset_id": reference_dataset_id,
                "repeats": repeats,
                "target_accuracy": target_accuracy,
                "target_probability": target_probability,
                "delta": delta,
                "loss": loss,
                "params": dict(params or {}),
                "seed": seed,
            },
        )
        path = f"/v1/datasets/{dataset_id}/plans"
        if svg:
            response = self._session.request(
                "POST",
                path,
                json=_body(body),
                idempotent=True,
                headers={"Accept": "image/svg+xml"},
            )
            return response.text
        return self._post(path, PlanRead, body, idempotent=True)

    def job(self, job_id: str, *, wait: float = 0.0) -> Job:
        """One job; ``wait`` > 0 long-polls until it ends (at most 30 s per request)."""
        params = {"wait": min(wait, MAX_WAIT)} if wait > 0 else {}
        return self._job(self._get(f"/v1/jobs/{job_id}", JobRead, **params))

    def jobs(self) -> list[Job]:
        """The calling site's jobs, newest first."""
        return [self._job(state) for state in self._pages("/v1/jobs", JobList)]

    def cancel_job(self, job_id: str) -> Job:
        """Cancel a queued or running job (409 once it has ended)."""
        return self._job(self._post(f"/v1/jobs/{job_id}/cancel", JobRead, idempotent=True))

    # --- models -------------------------------------------------------------------------

    def model(self, model_id: str) -> ModelRead:
        """A model: coefficients, preprocessing and privacy record."""
        return self._get(f"/v1/models/{model_id}", ModelRead)

    def models(self) -> list[ModelSummary]:
        """The models the calling site can read, newest first."""
        return list(self._pages("/v1/models", ModelList))

    def upload_model(self, model: ModelUpload | ModelExportRead | Mapping[str, Any]) -> ModelRead:
        """Store a model the site trained itself (its privacy claim is kept as declared).

        By the label's form: binary (one weight per encoded feature), multi-class
        (``classes``: one row of weights per class, row k scoring ``classes[k]``) or
        numeric (``lower``/``upper``: one weight per encoded feature, scoring in the label's
        [−1, 1] units). A PrivFit JSON export (:meth:`export`, or its dict) is uploaded as
        :func:`upload_from_export` makes it, and predicts the same."""
        if isinstance(model, ModelExportRead) or (
            isinstance(model, Mapping) and model.get("format") == EXPORT_FORMAT
        ):
            model = upload_from_export(model)
        body = model if isinstance(model, ModelUpload) else ModelUpload.model_validate(model)
        return self._post("/v1/models", ModelRead, body)

    @overload
    def predict(self, model_id: str, rows: Sequence[Mapping[str, Any]]) -> list[PredictionRead]: ...

    @overload
    def predict(self, model_id: str, rows: Any) -> Any: ...

    def predict(self, model_id: str, rows: Any) -> Any:
        """Predictions for raw rows: a list of dicts (returns a list of
        :class:`PredictionRead`, whose members are those of the model's task) or a DataFrame
        (returns a DataFrame on the same index with, by the model's task, ``positive``,
        ``score`` and ``probability``; ``predicted_class`` and one ``probability[<class>]``
        column per declared class; or ``value`` and ``score``: see
        :mod:`privfit_client.predictions`). Sent in batches of at most :data:`PREDICT_BATCH`
        rows."""
        rows_list = records(rows)
        predictions: list[PredictionRead] = []
        for start in range(0, len(rows_list), PREDICT_BATCH):
            batch = PredictRequest(rows=rows_list[start : start + PREDICT_BATCH])
            try:
                answer = self._post(
                    f"/v1/models/{model_id}/predict", PredictResponse, batch, idempotent=True
                )
            except ValidationFailed as exc:
                exc.add_note(f"row numbers count from row {start} (the batch's first row)")
                raise
            predictions.extend(answer.predictions)
        if is_dataframe(rows):
            return self._prediction_frame(model_id, predictions, rows.index)
        return predictions

    def _prediction_frame(
        self, model_id: str, predictions: Sequence[PredictionRead], index: Any
    ) -> Any:
        import pandas as pd

        if predictions and all(p.positive is not None for p in predictions):
            # binary: the columns are known without asking for the model
            return pd.DataFrame(
                [p.model_dump(include=set(BINARY_COLUMNS)) for p in predictions],
                columns=list(BINARY_COLUMNS),
                index=index,
            )
        model = self.model(model_id)
        return pd.DataFrame(
            [prediction_cells(model, p) for p in predictions],
            columns=prediction_columns(model),
            index=index,
        )

    @overload
    def export(self, model_id: str, format: Literal["json"] = "json") -> ModelExportRead: ...

    @overload
    def export(self, model_id: str, format: Literal["skops", "onnx"]) -> bytes: ...

    def export(self, model_id: str, format: ExportFormat = "json") -> ModelExportRead | bytes:
        """The model as PrivFit's JSON document, or as the bytes of a ``skops`` or ``onnx``
        file where the server offers them."""
        response = self._session.request(
            "GET", f"/v1/models/{model_id}/export", params={"format": format}
        )
        is_json = response.headers.get("content-type", "").startswith("application/json")
        if format == "json":
            return ModelExportRead.model_validate_json(response.content)
        if is_json:
            raise PrivFitError(f"this server does not export models as {format!r}")
        return response.content

    # --- studies ------------------------------------------------------------------------

    def create_study(
        self, name: str, members: Sequence[str], spec: StudySpecIn | SpecSource
    ) -> StudyRead:
        """Create a study as its coordinator. ``spec`` may be a dataset spec: only its label,
        features and row norm are used."""
        if not isinstance(spec, StudySpecIn):
            fields = StudySpecIn.model_fields
            spec = StudySpecIn.model_validate(
                {k: v for k, v in load_spec(spec).items() if k in fields}
            )
        body = StudyCreate(name=name, members=list(members), spec=spec)
        return self._post("/v1/studies", StudyRead, body)

    def studies(self) -> list[StudyRead]:
        """The studies the calling site belongs to."""
        return list(self._pages("/v1/studies", StudyList))

    def study(self, study_id: str) -> StudyRead:
        """One study with its members, contributions and results."""
        return self._get(f"/v1/studies/{study_id}", StudyRead)

    def contribute(
        self,
        study_id: str,
        *,
        model_id: str | None = None,
        dataset_id: str | None = None,
        epsilon_cap: float | None = None,
        delta_cap: float = 0.0,
    ) -> ContributionRead:
        """Contribute a model the site owns (``model_id``), or grant the study up to
        ``epsilon_cap`` (and ``delta_cap``) of a dataset's budget (``dataset_id``)."""
        body: ModelContributionIn | DatasetGrantIn
        if (model_id is None) == (dataset_id is None):
            raise ValueError("pass exactly one of model_id and dataset_id")
        if model_id is not None:
            body = ModelContributionIn(model_id=model_id)
        else:
            if epsilon_cap is None:
                raise ValueError("a dataset grant needs epsilon_cap")
            body = DatasetGrantIn(
                dataset_id=str(dataset_id), epsilon_cap=epsilon_cap, delta_cap=delta_cap
            )
        return self._post(f"/v1/studies/{study_id}/contributions", ContributionRead, body)

    def withdraw(self, study_id: str, contribution_id: str) -> None:
        """Withdraw an unused contribution."""
        self._session.request("DELETE", f"/v1/studies/{study_id}/contributions/{contribution_id}")

    def aggregate(
        self,
        study_id: str,
        method: Literal["average", "feature", "transfer"] = "average",
        *,
        wait: float | None = None,
        **fields: Any,
    ) -> Job:
        """Combine the study's contributed models (coordinator): ``average`` (``models``,
        ``weights``), ``feature`` (``holdout_dataset_id``, ``epsilon``, ...) or ``transfer``
        (``target_dataset_id``, ``epsilon``, ``transfer_strength``, ...). Returns the job."""
        if method not in _AGGREGATIONS:
            raise ValueError(f"unknown aggregation method {method!r}")
        body = _AGGREGATIONS[method].model_validate({"method": method, **fields})
        state = self._post(
            f"/v1/studies/{study_id}/aggregations", JobRead, body, headers=self._prefer(wait)
        )
        return self._job(state)

    def _federated_body(
        self, protocol: str, epsilon: float | None, fields: Mapping[str, Any]
    ) -> FederatedFitCreate:
        return FederatedFitCreate.model_validate(
            {"protocol": protocol, "epsilon": epsilon, **fields}
        )

    def federated_fit(
        self,
        study_id: str,
        protocol: str,
        *,
        epsilon: float | None,
        wait: float | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Job:
        """Run a federated fit across the study's granted datasets (coordinator):
        ``noisy_average``, ``psgd``, ``admm`` or ``distributed_lasso``; other fields
        (``delta``, ``regularization``, ``params``, ``datasets``, ``loss``, ``name``) as in
        the API. Retries reuse one idempotency key, so each dataset is charged once."""
        body = self._federated_body(protocol, epsilon, fields)
        state = self._post(
            f"/v1/studies/{study_id}/federated-fits",
            JobRead,
            body,
            idempotency_key=idempotency_key,
            headers=self._prefer(wait),
        )
        return self._job(state)

    def quote_federated_fit(
        self, study_id: str, protocol: str, *, epsilon: float | None, **fields: Any
    ) -> FederatedQuoteRead:
        """The dry run of :meth:`federated_fit`: each dataset's cost; spends nothing."""
        body = self._federated_body(protocol, epsilon, fields)
        return self._post(
            f"/v1/studies/{study_id}/federated-fits",
            FederatedQuoteRead,
            body,
            idempotent=True,
            params={"dry_run": "true"},
        )
