"""The privacy budget ledger (docs/design.md §2 "Ledger semantics", STYLE §4.6).

Every dataset has caps (ε_total, δ_total) and running totals spent, all integers in ledger units
(:mod:`service.domain.ledger.units`: 1e-9 ε, 1e-15 δ; charges round up, caps round down), so
spending
0.1 ten times from 1.0 succeeds and an eleventh fails.

Guarantees:

* **No overspending, even under races.** A charge is one conditional
  ``UPDATE dataset SET spent = spent + cost WHERE id = :id AND spent + cost <= cap AND
  deleted_at IS NULL`` followed by one ``INSERT INTO ledger_charge``. The UPDATE is atomic on
  PostgreSQL (row lock, WHERE re-checked at READ COMMITTED) and on SQLite (one writer at a time),
  and CHECK constraints (0 <= spent <= cap) are the backstop.
* **Invariant.** For every dataset, spent == SUM(units) over its charges in state ``charged``.
* **Grants.** A charge made through a study's dataset grant (federated fits) is also one
  conditional UPDATE of the grant's spent amounts, in the same transaction: it must fit under
  both the dataset's remaining budget and the grant's cap, and a refund credits both.
* **Idempotency.** A charge with an ``idempotency_key`` already used on that dataset returns the
  existing charge and spends nothing (UNIQUE(dataset_id, idempotency_key) settles races).
* **No refunds for started work.** :func:`refund` only credits the charges of a job that never
  started (cancelled while queued); a job that started keeps its charges even if it failed.

Transactions: these functions run inside the caller's open unit of work (``with uow:``) and do
not commit, so a use case can create its job and charge its budget in one short transaction;
the caller commits (that commit is the "charge committed before any noise is drawn" of
docs/design.md §2). On :class:`~service.domain.errors.BudgetExhaustedError` nothing was
charged by the failing call; :func:`charge_many` rolls back the whole unit of work before
raising, so none of its charges survive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.db.base import utcnow
from service.db.errors import IntegrityConflictError
from service.db.models import Dataset, LedgerCharge
from service.db.uow import UnitOfWork
from service.domain.errors import BudgetExhaustedError, ConflictError, NotFoundError
from service.domain.ids import MAX_IDEMPOTENCY_KEY_LENGTH
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units, to_units

__all__ = [
    "BudgetStatus",
    "ChargeRead",
    "ChargeRequest",
    "DatasetBudgetExhaustedError",
    "DatasetDeletedError",
    "DuplicateChargeError",
    "budget_status",
    "charge",
    "charge_many",
    "refund",
    "remaining",
]

MAX_MECHANISM_LENGTH = 64


class DatasetDeletedError(ConflictError):
    """The dataset was deleted: its content is gone and it can take no new charges (409)."""

    title = "Dataset deleted"


class DatasetBudgetExhaustedError(BudgetExhaustedError):
    """A dataset's budget cannot cover a charge (409, type ``…/budget-exhausted``); carries the
    remaining and requested ε and δ and the dataset's id. ``limit`` says what was short: the
    dataset's own budget, or a study's grant on it."""

    slug = "budget-exhausted"

    def __init__(
        self,
        detail: str,
        *,
        dataset_id: str,
        remaining_epsilon: float,
        remaining_delta: float,
        requested_epsilon: float,
        requested_delta: float,
        limit: str = "dataset",
    ) -> None:
        super().__init__(
            detail,
            remaining_epsilon=remaining_epsilon,
            remaining_delta=remaining_delta,
            requested_epsilon=requested_epsilon,
            requested_delta=requested_delta,
        )
        self.dataset_id = dataset_id
        self.limit = limit

    def extensions(self) -> dict[str, Any]:
        return {**super().extensions(), "dataset_id": self.dataset_id, "limit": self.limit}


class DuplicateChargeError(ConflictError):
    """A concurrent request charged with the same idempotency key first; retrying the request
    returns that charge (409)."""

    title = "Concurrent duplicate charge"


@dataclass(frozen=True, slots=True)
class ChargeRequest:
    """One charge of :func:`charge_many`."""

    dataset_id: str
    epsilon: float
    delta: float
    mechanism: str
    job_id: str | None = None
    idempotency_key: str | None = None
    #: A study's dataset grant the charge must also fit under (federated fits).
    grant_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChargeRead:
    """A ledger entry as shown to the dataset's owner."""

    id: str
    job_id: str | None
    epsilon: float
    delta: float
    mechanism: str
    state: str
    created_at: datetime
    refunded_at: datetime | None


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """Caps, amounts spent (charges not refunded), what remains, and every charge (oldest
    first). The ``*_units`` fields are the exact ledger integers."""

    dataset_id: str
    epsilon_total_units: int
    epsilon_spent_units: int
    delta_total_units: int
    delta_spent_units: int
    charges: tuple[ChargeRead, ...]

    @property
    def epsilon_remaining_units(self) -> int:
        return self.epsilon_total_units - self.epsilon_spent_units

    @property
    def delta_remaining_units(self) -> int:
        return self.delta_total_units - self.delta_spent_units

    @property
    def epsilon_total(self) -> float:
        return from_units(self.epsilon_total_units, EPSILON_UNIT)

    @property
    def epsilon_spent(self) -> float:
        return from_units(self.epsilon_spent_units, EPSILON_UNIT)

    @property
    def epsilon_remaining(self) -> float:
        return from_units(self.epsilon_remaining_units, EPSILON_UNIT)

    @property
    def delta_total(self) -> float:
        return from_units(self.delta_total_units, DELTA_UNIT)

    @property
    def delta_spent(self) -> float:
        return from_units(self.delta_spent_units, DELTA_UNIT)

    @property
    def delta_remaining(self) -> float:
        return from_units(self.delta_remaining_units, DELTA_UNIT)


def _cost_units(epsilon: float, delta: float) -> tuple[int, int]:
    """(ε, δ) as ledger units, rounded up; ValueError for amounts that are not costs."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float):
        raise ValueError("epsilon must be a number")
    if isinstance(delta, bool) or not isinstance(delta, int | float):
        raise ValueError("delta must be a number")
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ValueError(f"a charge's epsilon must be finite and >= 0, got {epsilon!r}")
    if not math.isfinite(delta) or not 0 <= delta < 1:
        raise ValueError(f"a charge's delta must satisfy 0 <= delta < 1, got {delta!r}")
    return to_units(epsilon, EPSILON_UNIT, "up"), to_units(delta, DELTA_UNIT, "up")


def _check_labels(mechanism: str, idempotency_key: str | None) -> None:
    if not mechanism or len(mechanism) > MAX_MECHANISM_LENGTH:
        raise ValueError(f"mechanism must have 1 to {MAX_MECHANISM_LENGTH} characters")
    if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
        raise ValueError(
            f"an idempotency key must have 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
        )


def _shortfall(
    uow: UnitOfWork, dataset_id: str, epsilon_units: int, delta_units: int, *, name_it: bool
) -> Exception:
    """Why the conditional UPDATE matched no row: unknown, deleted or not enough budget."""
    dataset = uow.datasets.get_fresh(dataset_id)
    if dataset is None:
        return NotFoundError("dataset")
    if dataset.deleted_at is not None:
        return DatasetDeletedError(
            f"dataset {dataset_id} was deleted; it can no longer be charged or fitted"
        )
    remaining_e = dataset.epsilon_cap_units - dataset.epsilon_spent_units
    remaining_d = dataset.delta_cap_units - dataset.delta_spent_units
    short = [
        what
        for what, need, left in (("ε", epsilon_units, remaining_e), ("δ", delta_units, remaining_d))
        if need > left
    ]
    subject = f"dataset {dataset_id}" if name_it else "this dataset"
    rem_e = from_units(remaining_e, EPSILON_UNIT)
    rem_d = from_units(remaining_d, DELTA_UNIT)
    req_e = from_units(epsilon_units, EPSILON_UNIT)
    req_d = from_units(delta_units, DELTA_UNIT)
    return DatasetBudgetExhaustedError(
        f"the privacy budget of {subject} cannot cover this request "
        f"({' and '.join(short) or 'budget'} short): requested ε={req_e!r}, δ={req_d!r}; "
        f"remaining ε={rem_e!r}, δ={rem_d!r}. Nothing was charged.",
        dataset_id=dataset_id,
        remaining_epsilon=rem_e,
        remaining_delta=rem_d,
        requested_epsilon=req_e,
        requested_delta=req_d,
    )


def _grant_shortfall(
    uow: UnitOfWork, request: ChargeRequest, epsilon_units: int, delta_units: int
) -> Exception:
    """The dataset could pay but the study's grant on it cannot (409 naming the dataset)."""
    assert request.grant_id is not None
    grant = uow.studies.get_grant_fresh(request.grant_id)
    if grant is None or grant.dataset_id != request.dataset_id:
        return NotFoundError("grant")
    left_e = int(grant.epsilon_cap_units or 0) - grant.epsilon_spent_units
    left_d = int(grant.delta_cap_units or 0) - grant.delta_spent_units
    short = [
        what
        for what, need, left in (("ε", epsilon_units, left_e), ("δ", delta_units, left_d))
        if need > left
    ]
    rem_e, rem_d = from_units(left_e, EPSILON_UNIT), from_units(left_d, DELTA_UNIT)
    req_e, req_d = from_units(epsilon_units, EPSILON_UNIT), from_units(delta_units, DELTA_UNIT)
    return DatasetBudgetExhaustedError(
        f"the study's grant on dataset {request.dataset_id} cannot cover this request "
        f"({' and '.join(short) or 'budget'} short): requested ε={req_e!r}, δ={req_d!r}; "
        f"left under the grant ε={rem_e!r}, δ={rem_d!r}. Nothing was charged.",
        dataset_id=request.dataset_id,
        remaining_epsilon=rem_e,
        remaining_delta=rem_d,
        requested_epsilon=req_e,
        requested_delta=req_d,
        limit="grant",
    )


def _existing(
    uow: UnitOfWork, dataset_id: str, key: str, epsilon_units: int, delta_units: int, mechanism: str
) -> LedgerCharge | None:
    found = uow.ledger.find_by_key(dataset_id, key)
    if found is None:
        return None
    if (found.epsilon_units, found.delta_units, found.mechanism) != (
        epsilon_units,
        delta_units,
        mechanism,
    ):
        raise ConflictError(
            "this idempotency key was already used for a different charge on this dataset"
        )
    return found


def _charge_one(uow: UnitOfWork, request: ChargeRequest, *, name_it: bool) -> LedgerCharge:
    _check_labels(request.mechanism, request.idempotency_key)
    epsilon_units, delta_units = _cost_units(request.epsilon, request.delta)
    if request.idempotency_key is not None:
        existing = _existing(
            uow,
            request.dataset_id,
            request.idempotency_key,
            epsilon_units,
            delta_units,
            request.mechanism,
        )
        if existing is not None:
            return existing
    if not uow.ledger.debit(request.dataset_id, epsilon_units, delta_units):
        raise _shortfall(uow, request.dataset_id, epsilon_units, delta_units, name_it=name_it)
    if request.grant_id is not None and not uow.studies.debit_grant(
        request.grant_id, epsilon_units, delta_units
    ):
        uow.ledger.credit(request.dataset_id, epsilon_units, delta_units)  # nothing charged
        raise _grant_shortfall(uow, request, epsilon_units, delta_units)
    try:
        row = uow.ledger.add(
            LedgerCharge(
                dataset_id=request.dataset_id,
                job_id=request.job_id,
                epsilon_units=epsilon_units,
                delta_units=delta_units,
                mechanism=request.mechanism,
                state="charged",
                idempotency_key=request.idempotency_key,
                grant_id=request.grant_id,
            )
        )
    except IntegrityConflictError as exc:
        if request.idempotency_key is None:
            raise
        raise DuplicateChargeError(
            "a concurrent request used the same idempotency key and was charged; retry to get "
            "its result"
        ) from exc
    return row


def charge(
    uow: UnitOfWork,
    *,
    dataset_id: str,
    epsilon: float,
    delta: float,
    mechanism: str,
    job_id: str | None = None,
    idempotency_key: str | None = None,
) -> LedgerCharge:
    """Charge (ε, δ) to a dataset's budget; returns the charge row. Inside ``with uow:``; the
    caller commits.

    Raises :class:`BudgetExhaustedError` (with the remaining ε and δ; nothing charged),
    :class:`DatasetDeletedError`, ``NotFoundError("dataset")``, ``ConflictError`` when the key
    was used for a different charge, :class:`DuplicateChargeError` when a concurrent request
    with the same key won (the unit of work must then be left), ``ValueError`` for amounts that
    are not costs (negative, NaN, δ ≥ 1).
    """
    request = ChargeRequest(
        dataset_id=dataset_id,
        epsilon=epsilon,
        delta=delta,
        mechanism=mechanism,
        job_id=job_id,
        idempotency_key=idempotency_key,
    )
    return _charge_one(uow, request, name_it=False)


def charge_many(uow: UnitOfWork, requests: Sequence[ChargeRequest]) -> list[str]:
    """Charge several datasets all-or-none (multi-dataset protocols); returns the charge ids in
    the order of ``requests``. Inside ``with uow:``; the caller commits.

    Datasets are charged in id order (a fixed lock order, so two concurrent multi-dataset
    charges cannot deadlock). If any charge fails, the unit of work is rolled back (every charge
    made by this call, and anything else not yet committed in it, is discarded) and the error
    is raised; a :class:`BudgetExhaustedError` names the dataset that is short.
    """
    order = sorted(range(len(requests)), key=lambda i: requests[i].dataset_id)
    ids: list[str | None] = [None] * len(requests)
    try:
        for i in order:
            ids[i] = _charge_one(uow, requests[i], name_it=True).id
    except BaseException:
        uow.rollback()
        raise
    return [i for i in ids if i is not None]


def refund(uow: UnitOfWork, *, job_id: str) -> int:
    """Credit back every charge of a job that never started (cancelled while queued); returns
    how many charges were refunded (0 when already refunded). Inside ``with uow:``; the caller
    commits.

    Raises ``NotFoundError("job")`` for an unknown job and ``ConflictError`` for a job that
    started: its failure or cancellation could itself reveal something, so it keeps its cost.
    """
    job = uow.ledger.job_state(job_id)
    if job is None:
        raise NotFoundError("job")
    status, started_at = job
    if started_at is not None or status not in ("queued", "cancelled"):
        raise ConflictError("a job that has started is never refunded")
    refunded = 0
    at = utcnow()
    for row in uow.ledger.charges_for_job(job_id, state="charged"):
        if uow.ledger.mark_refunded(row.id, at=at):
            uow.ledger.credit(row.dataset_id, row.epsilon_units, row.delta_units)
            if row.grant_id is not None:
                uow.studies.credit_grant(row.grant_id, row.epsilon_units, row.delta_units)
            refunded += 1
    return refunded


def _read(row: LedgerCharge) -> ChargeRead:
    return ChargeRead(
        id=row.id,
        job_id=row.job_id,
        epsilon=from_units(row.epsilon_units, EPSILON_UNIT),
        delta=from_units(row.delta_units, DELTA_UNIT),
        mechanism=row.mechanism,
        state=row.state,
        created_at=row.created_at,
        refunded_at=row.refunded_at,
    )


def budget_status(uow: UnitOfWork, *, dataset_id: str) -> BudgetStatus:
    """The dataset's caps, spent amounts and charges (no access check: callers do that).
    Inside ``with uow:``. Raises ``NotFoundError("dataset")``."""
    dataset: Dataset | None = uow.datasets.get_fresh(dataset_id)
    if dataset is None:
        raise NotFoundError("dataset")
    return BudgetStatus(
        dataset_id=dataset.id,
        epsilon_total_units=dataset.epsilon_cap_units,
        epsilon_spent_units=dataset.epsilon_spent_units,
        delta_total_units=dataset.delta_cap_units,
        delta_spent_units=dataset.delta_spent_units,
        charges=tuple(_read(row) for row in uow.ledger.charges_for_dataset(dataset_id)),
    )


def remaining(dataset: Dataset) -> tuple[float, float]:
    """(ε, δ) left on a dataset's budget as last read (exact units converted once)."""
    return (
        from_units(dataset.epsilon_cap_units - dataset.epsilon_spent_units, EPSILON_UNIT),
        from_units(dataset.delta_cap_units - dataset.delta_spent_units, DELTA_UNIT),
    )
