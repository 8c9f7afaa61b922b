"""``privfit-client``: PrivFit from the shell.

Every command takes ``--json`` (one JSON document on stdout, for scripts). Exit codes:

    0 ok                     4 privacy budget exhausted (409)
    1 other error            5 job failed or cancelled
    2 usage error            6 authentication or permission (401, 403)
    3 not found (404)        7 request rejected as invalid (422, 413, other 409)
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Final

import httpx
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

from privfit_client import config
from privfit_client.client import PREDICT_BATCH, Client
from privfit_client.errors import (
    BudgetExhausted,
    Conflict,
    Forbidden,
    JobFailed,
    NotFound,
    PayloadTooLarge,
    PrivFitError,
    ProblemError,
    Unauthenticated,
    ValidationFailed,
)
from privfit_client.jobs import Job
from privfit_client.predictions import prediction_cells, prediction_columns

__all__ = ["EXIT_CODES", "app", "main"]

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_BUDGET: Final = 4
EXIT_JOB_FAILED: Final = 5
EXIT_AUTH: Final = 6
EXIT_INVALID: Final = 7
#: Exit code by exception class, most specific first.
EXIT_CODES: Final[tuple[tuple[type[BaseException], int], ...]] = (
    (BudgetExhausted, EXIT_BUDGET),
    (NotFound, EXIT_NOT_FOUND),
    (Unauthenticated, EXIT_AUTH),
    (Forbidden, EXIT_AUTH),
    (ValidationFailed, EXIT_INVALID),
    (PayloadTooLarge, EXIT_INVALID),
    (Conflict, EXIT_INVALID),
    (JobFailed, EXIT_JOB_FAILED),
)


class UsageProblem(Exception):
    """The command cannot run as called (exit code 2)."""


app = typer.Typer(
    name="privfit-client",
    help="PrivFit from the shell: upload, fit under a privacy budget, predict, export.",
    epilog="Exit codes: 0 ok, 1 other error, 2 usage, 3 not found, 4 budget exhausted, "
    "5 job failed or cancelled, 6 authentication or permission, 7 invalid request.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
WaitFlag = Annotated[bool, typer.Option("--wait", help="Wait for the job to end (progress bar).")]


class _State:
    url: str | None = None
    key: str | None = None


_state = _State()


@app.callback()
def _options(
    url: Annotated[
        str | None, typer.Option(envvar="PRIVFIT_URL", help="Server URL (else the login's).")
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(envvar="PRIVFIT_KEY", help="API key (else the login's).", show_default=False),
    ] = None,
) -> None:
    """Credentials come from --url/--key, PRIVFIT_URL/PRIVFIT_KEY, or `privfit-client login`."""
    _state.url, _state.key = url, key


def _client() -> Client:
    saved = config.load()
    url = _state.url or saved.url
    key = _state.key or saved.key
    if not url or not key:
        raise UsageProblem("not logged in: run `privfit-client login` or set PRIVFIT_URL/KEY")
    return Client(url, key)


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Job):
        return value.state.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _emit(as_json: bool, value: Any, human: Callable[[], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(_dump(value), indent=2) + "\n")
    else:
        human()


#: Characters that reorder displayed text (Unicode bidi embeddings, overrides, isolates, marks).
_BIDI_CONTROLS: Final = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def inert(value: object) -> Text:
    """``value`` as terminal text that cannot act on the line it is in: each bidi control is
    shown as its code point (``[U+202E]``), so a name cannot reorder or disguise text, and
    nothing in it is read as Rich markup."""
    return Text("".join(f"[U+{ord(ch):04X}]" if ch in _BIDI_CONTROLS else ch for ch in str(value)))


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=inert(title))
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(Text("") if v is None else inert(v) for v in row))
    out.print(table)


def _finish(job: Job, wait: bool, as_json: bool) -> Job:
    if wait:
        job.wait(progress=not as_json, raise_on_failure=False)
    return job


def _job_line(job: Job) -> None:
    out.print(f"job {job.id}: {job.kind} {job.status} ({job.progress:.0%})")
    if job.model_id:
        out.print(f"model {job.model_id}")
    if job.error:
        out.print(f"error: {job.error.title}: {job.error.detail}")


def _fail_unless_succeeded(job: Job) -> None:
    if job.done and job.status != "succeeded":
        raise JobFailed(job.state)


# --- commands ---------------------------------------------------------------------------


@app.command()
def login(
    url: Annotated[str, typer.Option(prompt="PrivFit URL", help="e.g. http://127.0.0.1:8000")],
    key: Annotated[
        str, typer.Option(prompt="API key", hide_input=True, help="A site or admin key.")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Check a URL and key against the server and save them (file mode 0600)."""
    with Client(url, key) as client:
        try:
            who: dict[str, Any] = {"role": "site", "site": _dump(client.me())}
        except Forbidden:  # the admin key has no site
            client.sites()
            who = {"role": "admin", "site": None}
    path = config.save(config.Credentials(url, key))
    who["config"] = str(path)

    def human() -> None:
        name = who["site"]["name"] if who["site"] else "admin"
        out.print(Text.assemble(f"logged in to {url} as ", inert(name), f"; saved to {path}"))

    _emit(as_json, who, human)


@app.command()
def upload(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="CSV or Parquet.")],
    spec: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="The JSON spec.")],
    as_json: JsonFlag = False,
) -> None:
    """Upload a dataset with its public spec."""
    with _client() as client:
        dataset = client.upload(file, spec)
    _emit(
        as_json,
        dataset,
        lambda: out.print(
            f"dataset {dataset.id}: {dataset.n_rows} rows, {dataset.n_features} features, "
            f"budget ε={dataset.budget.epsilon:g} δ={dataset.budget.delta:g}"
        ),
    )


@app.command()
def datasets(as_json: JsonFlag = False) -> None:
    """List the site's datasets."""
    with _client() as client:
        items = client.datasets()
    rows = [(d.id, d.name, d.n_rows, d.n_features, d.created_at) for d in items]
    _emit(
        as_json,
        items,
        lambda: _table("datasets", ("id", "name", "rows", "features", "created"), rows),
    )


def _params(values: Sequence[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in values:
        name, sep, text = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"{item!r} is not NAME=VALUE", param_hint="--param")
        try:
            params[name] = json.loads(text)
        except ValueError:
            params[name] = text
    return params


@app.command()
def fit(
    dataset: Annotated[str, typer.Argument(help="Dataset id.")],
    mechanism: Annotated[str, typer.Option(help="DP mechanism.")] = "objective_perturbation",
    epsilon: Annotated[float | None, typer.Option(help="ε to spend.")] = None,
    delta: Annotated[float, typer.Option(help="δ to spend.")] = 0.0,
    regularization: Annotated[
        str, typer.Option(help="λ (L2), or auto: chosen from public quantities at no cost.")
    ] = "auto",
    loss: Annotated[
        str | None,
        typer.Option(
            help="logistic or huber (binary), logistic (multi-class), squared or huber "
            "(regression); default: the dataset's task's first."
        ),
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option(help="Mechanism parameter NAME=VALUE (repeatable).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Quote only; spend nothing.")] = False,
    wait: WaitFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Fit a model under the dataset's budget (charged once, before any noise is drawn)."""
    options: dict[str, Any] = {
        "epsilon": epsilon,
        "delta": delta,
        "regularization": regularization if regularization == "auto" else float(regularization),
        "loss": loss,
        "params": _params(param or []),
    }
    with _client() as client:
        if dry_run:
            quote = client.quote_fit(dataset, mechanism, **options)
            _emit(
                as_json,
                quote,
                lambda: out.print(
                    f"cost ε={quote.cost.epsilon:g} δ={quote.cost.delta:g}; remaining "
                    f"ε={quote.budget.remaining_epsilon:g}; sufficient: {quote.budget.sufficient}"
                ),
            )
            return
        job = _finish(client.fit(dataset, mechanism, **options), wait, as_json)
    _emit(as_json, job, lambda: _job_line(job))
    _fail_unless_succeeded(job)


@app.command()
def jobs(as_json: JsonFlag = False) -> None:
    """List the site's jobs."""
    with _client() as client:
        items = client.jobs()
    rows = [(j.id, j.kind, j.status, f"{j.progress:.0%}", j.model_id) for j in items]
    _emit(
        as_json, items, lambda: _table("jobs", ("id", "kind", "status", "progress", "model"), rows)
    )


@app.command()
def job(
    job_id: Annotated[str, typer.Argument(help="Job id.")],
    wait: WaitFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Show a job (with --wait: once it has ended)."""
    with _client() as client:
        found = _finish(client.job(job_id), wait, as_json)
    _emit(as_json, found, lambda: _job_line(found))
    _fail_unless_succeeded(found)


@app.command("upload-model")
def upload_model(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="JSON: the POST /v1/models body (label, features, weights, loss, "
            "privacy_claim), or a PrivFit JSON export.",
        ),
    ],
    as_json: JsonFlag = False,
) -> None:
    """Upload a model trained elsewhere: binary (one weight per encoded feature), multi-class
    (one row of weights per class) or regression (weights in the label's [-1, 1] units)."""
    try:
        body = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageProblem(f"{file} is not a JSON file: {exc}") from exc
    if not isinstance(body, dict):
        raise UsageProblem(f"{file} must hold a JSON object")
    with _client() as client:
        try:
            model = client.upload_model(body)
        except ValueError as exc:  # pydantic's ValidationError included
            raise UsageProblem(f"{file} is not a model upload: {exc}") from exc
    _emit(
        as_json,
        model,
        lambda: out.print(
            f"model {model.id}: {model.task}, {len(model.feature_names)} features, "
            f"verified: {model.privacy.verified}"
        ),
    )


@app.command()
def models(as_json: JsonFlag = False) -> None:
    """List the models the site can read."""
    with _client() as client:
        items = client.models()
    rows = [(m.id, m.source, m.mechanism, m.epsilon, m.delta, m.verified) for m in items]
    columns = ("id", "source", "mechanism", "ε", "δ", "verified")
    _emit(as_json, items, lambda: _table("models", columns, rows))


@app.command()
def model(model_id: Annotated[str, typer.Argument()], as_json: JsonFlag = False) -> None:
    """Show a model and its privacy statement."""
    with _client() as client:
        found = client.model(model_id)
    _emit(as_json, found, lambda: out.print(f"model {found.id}: {found.privacy.statement}"))


def _chunks(reader: Iterator[dict[str, str]], size: int) -> Iterator[list[dict[str, str]]]:
    chunk: list[dict[str, str]] = []
    for row in reader:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@app.command()
def predict(
    model_id: Annotated[str, typer.Argument(help="Model id.")],
    source: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Input CSV.")],
    target: Annotated[Path, typer.Argument(dir_okay=False, help="Output CSV.")],
    as_json: JsonFlag = False,
) -> None:
    """Score a CSV file: the output has its columns plus, by the model's task, positive, score
    and probability (binary); predicted_class and probability[CLASS] per declared class
    (multi-class); or value and score (regression)."""
    count = positives = 0
    by_class: dict[str, int] = {}
    with (
        _client() as client,
        source.open(newline="", encoding="utf-8") as inp,
        target.open("w", newline="", encoding="utf-8") as outp,
    ):
        found = client.model(model_id)
        reader = csv.DictReader(inp)
        fields = [*(reader.fieldnames or []), *prediction_columns(found)]
        writer = csv.DictWriter(outp, fieldnames=fields)
        writer.writeheader()
        for chunk in _chunks(reader, PREDICT_BATCH):
            sent = [{k: (None if v == "" else v) for k, v in row.items()} for row in chunk]
            try:
                predictions = client.predict(model_id, sent)
            except ValidationFailed as exc:
                exc.add_note(f"in the {PREDICT_BATCH} data rows after row {count} of {source}")
                raise
            for row, p in zip(chunk, predictions, strict=True):
                writer.writerow({**row, **prediction_cells(found, p)})
                if p.predicted_class is not None:
                    by_class[p.predicted_class] = by_class.get(p.predicted_class, 0) + 1
            count += len(chunk)
            positives += sum(bool(p.positive) for p in predictions)
    summary: dict[str, Any] = {"rows": count, "output": str(target)}
    if found.task == "multiclass":
        summary["predicted_classes"] = by_class
        line = f"{count} rows scored ({len(by_class)} classes predicted) into {target}"
    elif found.task == "regression":
        line = f"{count} rows scored (values) into {target}"
    else:
        summary = {"rows": count, "positive": positives, "output": str(target)}
        line = f"{count} rows scored ({positives} positive) into {target}"
    _emit(as_json, summary, lambda: out.print(inert(line)))


@app.command()
def export(
    model_id: Annotated[str, typer.Argument(help="Model id.")],
    format: Annotated[str, typer.Option(help="json, skops or onnx.")] = "json",
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", dir_okay=False, help="File (default: model.FORMAT)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Save a model as PrivFit's JSON document (or skops / ONNX where the server offers them)."""
    if format not in ("json", "skops", "onnx"):
        raise typer.BadParameter("json, skops or onnx", param_hint="--format")
    output = output or Path(f"model.{format}")
    with _client() as client:
        if format == "json":
            data = client.export(model_id).model_dump_json(indent=2).encode() + b"\n"
        else:
            data = client.export(model_id, "skops" if format == "skops" else "onnx")
    output.write_bytes(data)
    summary = {"model_id": model_id, "format": format, "output": str(output), "bytes": len(data)}
    _emit(as_json, summary, lambda: out.print(f"model {model_id} saved to {output} ({format})"))


PlotOption = Annotated[
    Path | None, typer.Option("--plot", dir_okay=False, help="Draw it to a .png or .svg file.")
]


@app.command()
def budget(
    dataset: Annotated[str, typer.Argument(help="Dataset id.")],
    plot: PlotOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a dataset's privacy budget: caps, spent, remaining, every charge."""
    with _client() as client:
        state = client.budget(dataset)
    if plot is not None:
        from privfit_client import plot as pictures

        pictures.budget_over_time(state, plot)

    def human() -> None:
        out.print(
            f"ε spent {state.epsilon_spent:g} of {state.epsilon_total:g} "
            f"(remaining {state.epsilon_remaining:g}); δ spent {state.delta_spent:g} of "
            f"{state.delta_total:g} (remaining {state.delta_remaining:g})"
        )
        rows = [
            (c.created_at, c.job_id, c.mechanism, c.epsilon, c.delta, c.state)
            for c in state.charges
        ]
        _table("charges", ("time", "job", "mechanism", "ε", "δ", "state"), rows)
        if plot is not None:
            out.print(f"picture saved to {plot}")

    _emit(as_json, state, human)


@app.command()
def plan(
    dataset: Annotated[str, typer.Argument(help="Dataset id.")],
    epsilon: Annotated[
        list[float], typer.Option("--epsilon", help="A grid value of ε (repeat the option).")
    ],
    mechanism: Annotated[str, typer.Option(help="The mechanism to plan.")] = (
        "objective_perturbation"
    ),
    regularization: Annotated[float, typer.Option(help="λ.")] = 1e-3,
    reference: Annotated[
        str | None,
        typer.Option(help="A public dataset of yours with the same spec, to simulate accuracy."),
    ] = None,
    target_accuracy: Annotated[float | None, typer.Option(help="Accuracy to reach.")] = None,
    plot: PlotOption = None,
    as_json: JsonFlag = False,
) -> None:
    """The privacy–utility plan of a dataset: expected noise, risk bound and (with a public
    reference) simulated accuracy for each ε. Spends nothing."""
    with _client() as client:
        result = client.plan(
            dataset,
            mechanism,
            epsilons=epsilon,
            regularizations=[regularization],
            reference_dataset_id=reference,
            target_accuracy=target_accuracy,
        )
    assert not isinstance(result, str)
    if plot is not None:
        from privfit_client import plot as pictures

        pictures.plan_curve(result, plot)

    def human() -> None:
        out.print(result.model_dump_json(indent=2))
        if plot is not None:
            out.print(f"picture saved to {plot}")

    _emit(as_json, result, human)


@app.command()
def studies(as_json: JsonFlag = False) -> None:
    """List the studies the site belongs to."""
    with _client() as client:
        items = client.studies()
    rows = [(s.id, s.name, s.coordinator, len(s.members), len(s.results)) for s in items]
    columns = ("id", "name", "coordinator", "members", "results")
    _emit(as_json, items, lambda: _table("studies", columns, rows))


@app.command()
def study(
    study_id: Annotated[str, typer.Argument(help="Study id.")],
    plot: PlotOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a study: members, contributions (ε granted and spent) and results."""
    with _client() as client:
        found = client.study(study_id)
    if plot is not None:
        from privfit_client import plot as pictures

        pictures.study_spend(found, plot)

    def human() -> None:
        rows = [
            (c.id, c.site_id, c.kind, c.model_id or c.dataset_id, c.epsilon_cap, c.epsilon_spent)
            for c in found.contributions
        ]
        _table(
            f"study {found.name}", ("contribution", "site", "kind", "of", "ε cap", "ε spent"), rows
        )
        for result in found.results:
            out.print(f"result: model {result.model_id} ({result.method})")

    _emit(as_json, found, human)


@app.command()
def aggregate(
    study_id: Annotated[str, typer.Argument(help="Study id.")],
    method: Annotated[str, typer.Option(help="average, feature or transfer.")] = "average",
    model: Annotated[list[str] | None, typer.Option(help="Contributed model (repeatable).")] = None,
    weight: Annotated[list[float] | None, typer.Option(help="Weight per model (average).")] = None,
    epsilon: Annotated[float | None, typer.Option(help="ε (feature, transfer).")] = None,
    holdout: Annotated[str | None, typer.Option(help="Holdout dataset (feature).")] = None,
    target: Annotated[str | None, typer.Option(help="Target dataset (transfer).")] = None,
    transfer_strength: Annotated[float | None, typer.Option(help="(transfer).")] = None,
    name: Annotated[str | None, typer.Option(help="Name of the result.")] = None,
    wait: WaitFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Combine a study's contributed models (coordinator)."""
    if method not in ("average", "feature", "transfer"):
        raise typer.BadParameter("average, feature or transfer", param_hint="--method")
    given = {
        "name": name,
        "epsilon": epsilon,
        "holdout_dataset_id": holdout,
        "target_dataset_id": target,
        "transfer_strength": transfer_strength,
        "weights": weight or None,
        "models" if method == "average" else "source_models": model or None,
    }
    fields = {k: v for k, v in given.items() if v is not None}
    with _client() as client:
        started = _finish(client.aggregate(study_id, method, **fields), wait, as_json)  # type: ignore[arg-type]
    _emit(as_json, started, lambda: _job_line(started))
    _fail_unless_succeeded(started)


@app.command()
def contribute(
    study_id: Annotated[str, typer.Argument(help="Study id.")],
    model: Annotated[str | None, typer.Option(help="A model the site owns.")] = None,
    dataset: Annotated[str | None, typer.Option(help="A dataset to grant budget of.")] = None,
    epsilon_cap: Annotated[float | None, typer.Option(help="ε granted (with --dataset).")] = None,
    delta_cap: Annotated[float, typer.Option(help="δ granted (with --dataset).")] = 0.0,
    as_json: JsonFlag = False,
) -> None:
    """Contribute a model to a study, or grant it part of a dataset's budget."""
    if (model is None) == (dataset is None):
        raise UsageProblem("pass exactly one of --model and --dataset")
    if dataset is not None and epsilon_cap is None:
        raise UsageProblem("a dataset grant needs --epsilon-cap")
    with _client() as client:
        made = client.contribute(
            study_id,
            model_id=model,
            dataset_id=dataset,
            epsilon_cap=epsilon_cap,
            delta_cap=delta_cap,
        )
    _emit(as_json, made, lambda: out.print(f"contribution {made.id} ({made.kind}) to {study_id}"))


@app.command("federated-fit")
def federated_fit(
    study_id: Annotated[str, typer.Argument(help="Study id.")],
    protocol: Annotated[str, typer.Option(help="noisy_average, psgd, admm, distributed_lasso.")],
    epsilon: Annotated[float | None, typer.Option(help="ε charged to each dataset.")] = None,
    delta: Annotated[float, typer.Option(help="δ charged to each dataset.")] = 0.0,
    regularization: Annotated[float, typer.Option(help="λ (L2).")] = 0.01,
    param: Annotated[
        list[str] | None, typer.Option(help="Protocol parameter NAME=VALUE (repeatable).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Quote only; spend nothing.")] = False,
    wait: WaitFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Fit one model across the study's granted datasets (coordinator)."""
    options: dict[str, Any] = {
        "delta": delta,
        "regularization": regularization,
        "params": _params(param or []),
    }
    with _client() as client:
        if dry_run:
            quote = client.quote_federated_fit(study_id, protocol, epsilon=epsilon, **options)
            rows = [
                (c.dataset_id, c.site_id, c.epsilon, c.delta, c.sufficient) for c in quote.costs
            ]
            columns = ("dataset", "site", "ε", "δ", "sufficient")
            _emit(as_json, quote, lambda: _table(f"{protocol}: cost per dataset", columns, rows))
            return
        started = client.federated_fit(study_id, protocol, epsilon=epsilon, **options)
        started = _finish(started, wait, as_json)
    _emit(as_json, started, lambda: _job_line(started))
    _fail_unless_succeeded(started)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="Job id.")], as_json: JsonFlag = False
) -> None:
    """Cancel a queued or running job (a queued job's charge is refunded)."""
    with _client() as client:
        state = client.cancel_job(job_id)
    _emit(as_json, state, lambda: _job_line(state))


# --- entry point --------------------------------------------------------------------------


def _exit_code(exc: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns (and, as a script, exits with) the exit code."""
    command = typer.main.get_command(app)
    args = list(argv) if argv is not None else sys.argv[1:]
    try:
        result = command.main(args=args, prog_name="privfit-client", standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        return EXIT_ERROR
    except typer.TyperException as exc:  # usage errors of the command-line parser
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err.print(str(exc), markup=False)
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    except UsageProblem as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    except (PrivFitError, httpx.HTTPError, OSError, ValueError) as exc:
        message = str(exc)
        for note in getattr(exc, "__notes__", []):
            message += f"\n{note}"
        if isinstance(exc, ProblemError) and exc.request_id:
            message += f"\n(request id {exc.request_id})"
        err.print(f"error: {message}", markup=False, highlight=False)
        return _exit_code(exc)
    return result if isinstance(result, int) else EXIT_OK


def run() -> None:
    """The ``privfit-client`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
