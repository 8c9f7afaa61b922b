"""Datasets: upload, listing, reading, deletion, their budget, and their content for fits.

Tenancy (docs/design.md §5): a site sees and deletes only its own datasets; another site's
dataset is a 404, never a 403, and nothing about it (not even whether it exists) leaks. The
admin can read, list and delete every dataset (an operator removing data on request) but
cannot upload one: a dataset belongs to a site.

Deletion removes the content (every ``dataset_chunk`` row) and sets ``deleted_at``, in one
transaction. The dataset row and its ledger stay, so the owner can still read what was spent.
A deleted dataset cannot be charged or loaded: fits on it get 409 ``dataset-deleted``
(:class:`~service.domain.ledger.budgets.DatasetDeletedError`) rather than 404, because the resource
exists and the client should learn why it cannot be used. Listing hides deleted datasets
unless asked; deleting twice is a no-op.
"""

from __future__ import annotations

import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Final

import numpy as np
from numpy.typing import NDArray

from service.db.base import utcnow
from service.db.models import Dataset
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.codec import EncodedChunk, design_from_chunks
from service.domain.datasets.ingest import ingest
from service.domain.datasets.labels import LabelTask
from service.domain.datasets.spec import DatasetSpec
from service.domain.errors import NotFoundError
from service.domain.ids import looks_like_id
from service.domain.ledger.budgets import BudgetStatus, DatasetDeletedError, budget_status
from service.dp.data.prepared import PreparedDesign, prepare_design
from service.dp.data.preprocessing import PreprocessingSpec

__all__ = [
    "DatasetPage",
    "Design",
    "create_dataset",
    "dataset_task",
    "delete_dataset",
    "design_cache",
    "get_budget",
    "get_dataset",
    "get_owned_dataset",
    "list_datasets",
    "load_design",
    "read_design",
]

#: Encoded chunks of an upload stay in memory up to this size, then go to a temporary file.
STAGING_MEMORY_BYTES: Final[int] = 16 << 20


@dataclass(frozen=True, slots=True)
class DatasetPage:
    """One page of datasets."""

    items: Sequence[Dataset]
    total: int


class _StagedChunks:
    """Encoded chunks kept aside while a file is read: in memory up to
    :data:`STAGING_MEMORY_BYTES`, then in a temporary file on disk (deleted on close).

    Encoded chunks are much smaller than the upload (about 15 % of a CSV's size), so staging
    them costs little and lets the upload be parsed with no transaction open.
    """

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=STAGING_MEMORY_BYTES)  # noqa: SIM115
        self._index: list[tuple[int, int, int]] = []  # (seq, n_rows, payload length)

    def add(self, chunk: EncodedChunk) -> None:
        self._file.write(chunk.payload)
        self._index.append((chunk.seq, chunk.n_rows, len(chunk.payload)))

    def __iter__(self) -> Iterator[EncodedChunk]:
        self._file.seek(0)
        for seq, n_rows, size in self._index:
            yield EncodedChunk(seq=seq, n_rows=n_rows, payload=self._file.read(size))

    def close(self) -> None:
        self._file.close()


def create_dataset(
    uow: UnitOfWork,
    *,
    actor: Principal,
    spec: DatasetSpec,
    source: IO[bytes],
    context: AuditContext,
) -> Dataset:
    """Ingest ``source`` under ``spec`` for the calling site and store it in one transaction.

    The whole file is read, validated and encoded first, with no transaction open (so a large
    upload holds neither SQLite's single write lock nor a PostgreSQL connection while it is
    parsed); the encoded chunks are staged aside (:class:`_StagedChunks`). Only then are the
    dataset row and every chunk written, in one short transaction. A rejected upload
    (:class:`~service.domain.datasets.spec.DatasetInputError`, or any other error) stores nothing.
    Requires a site key (the admin owns no data).
    """
    owner = actor.require_site()
    prep = spec.preprocessing
    staged = _StagedChunks()
    try:
        report = ingest(source, spec, on_chunk=staged.add)
        with uow:
            dataset = uow.datasets.add(
                Dataset(
                    owner_site_id=owner,
                    name=spec.name,
                    spec=spec.to_dict(),
                    preprocessing=prep.to_dict(),
                    feature_names=list(prep.feature_names()),
                    n_rows=report.n_rows,
                    n_features=prep.n_features,
                    allow_non_private=spec.allow_non_private,
                    epsilon_cap_units=spec.epsilon_cap_units,
                    delta_cap_units=spec.delta_cap_units,
                    epsilon_spent_units=0,
                    delta_spent_units=0,
                    ingest=report.to_dict(),
                )
            )
            for chunk in staged:
                uow.datasets.add_chunk(
                    dataset.id, seq=chunk.seq, n_rows=chunk.n_rows, payload=chunk.payload
                )
            audit.record(
                uow,
                action="dataset.created",
                actor=actor,
                context=context,
                subject_type="dataset",
                subject_id=dataset.id,
                details={"name": spec.name, "format": report.format, "chunks": report.n_chunks},
            )
            uow.commit()
            return dataset
    finally:
        staged.close()


def _visible(uow: UnitOfWork, dataset_id: str, actor: Principal) -> Dataset:
    """The dataset if ``actor``'s site owns it; else NotFound (the admin owns none)."""
    if not looks_like_id(dataset_id):
        raise NotFoundError("dataset")
    dataset = uow.datasets.get(dataset_id)
    if dataset is None or not actor.owns(dataset.owner_site_id):
        raise NotFoundError("dataset")
    return dataset


def get_owned_dataset(uow: UnitOfWork, *, dataset_id: str, actor: Principal) -> Dataset:
    """Inside an open ``with uow:``: the dataset if ``actor``'s site owns it, else NotFound
    (also for the admin, who owns no dataset)."""
    owner = actor.site_or_not_found("dataset")
    if not looks_like_id(dataset_id):
        raise NotFoundError("dataset")
    dataset = uow.datasets.get(dataset_id)
    if dataset is None or dataset.owner_site_id != owner:
        raise NotFoundError("dataset")
    return dataset


def require_live(dataset: Dataset, *, use: str = "fitted") -> Dataset:
    """Refuse (409) a deleted dataset before anything else, so a dry run never quotes a job
    that could not be charged; ``use`` says what the job would have done with it."""
    if dataset.deleted_at is not None:
        raise DatasetDeletedError(
            f"dataset {dataset.id} was deleted; it can no longer be charged or {use}"
        )
    return dataset


def get_dataset(uow: UnitOfWork, *, dataset_id: str, actor: Principal) -> Dataset:
    """A dataset's metadata (deleted ones included, with ``deleted_at`` set)."""
    with uow:
        return _visible(uow, dataset_id, actor)


def list_datasets(
    uow: UnitOfWork,
    *,
    actor: Principal,
    limit: int,
    offset: int,
    include_deleted: bool = False,
) -> DatasetPage:
    """The caller's datasets, newest first (403 for the admin, which owns none)."""
    owner = actor.require_site()
    with uow:
        return DatasetPage(
            items=uow.datasets.list_page(
                owner_site_id=owner, include_deleted=include_deleted, limit=limit, offset=offset
            ),
            total=uow.datasets.count(owner_site_id=owner, include_deleted=include_deleted),
        )


def delete_dataset(
    uow: UnitOfWork, *, dataset_id: str, actor: Principal, context: AuditContext
) -> Dataset:
    """Remove a dataset's content and mark it deleted; its row and ledger are kept.

    Idempotent: deleting a deleted dataset changes nothing. Queued fits on it fail when they
    try to load it (:class:`DatasetDeletedError`).
    """
    with uow:
        dataset = _visible(uow, dataset_id, actor)
        if dataset.deleted_at is None:
            removed = uow.datasets.delete_chunks(dataset.id)
            dataset.deleted_at = utcnow()
            audit.record(
                uow,
                action="dataset.deleted",
                actor=actor,
                context=context,
                subject_type="dataset",
                subject_id=dataset.id,
                details={"chunks_removed": removed},
            )
            uow.commit()
        return dataset


def get_budget(uow: UnitOfWork, *, dataset_id: str, actor: Principal) -> BudgetStatus:
    """The dataset's budget and ledger (its owner only; deleted datasets included)."""
    with uow:
        _visible(uow, dataset_id, actor)
        return budget_status(uow, dataset_id=dataset_id)


Design = tuple[NDArray[np.float64], NDArray[np.float64]]


class _DesignCache:
    """Designs recently read by this process, least recently used out first.

    A dataset's content never changes after its upload committed (it can only be deleted, and
    :func:`read_design` checks that in the database before every use), so a worker that fits
    the same dataset again skips decoding it, checking it (:func:`service.dp.prepare_design`)
    and the solver's float32 working copy of it. Arrays are read-only: a fit cannot alter them.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, PreparedDesign] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, dataset_id: str) -> PreparedDesign | None:
        with self._lock:
            item = self._items.get(dataset_id)
            if item is not None:
                self._items.move_to_end(dataset_id)
            return item

    def put(self, dataset_id: str, design: PreparedDesign) -> None:
        # Sized as X, y and a float32 copy of X: what a fit's solver derives from it.
        if self._size(design) > self.max_bytes:
            return
        with self._lock:
            self._items[dataset_id] = design
            self._items.move_to_end(dataset_id)
            while sum(self._size(d) for d in self._items.values()) > self.max_bytes:
                self._items.popitem(last=False)

    @staticmethod
    def _size(design: PreparedDesign) -> int:
        return int(design.X.nbytes * 3 // 2 + design.y.nbytes)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


#: Per process; 512 MiB holds Adult (25 MB) many times over.
design_cache = _DesignCache(max_bytes=512 * 1024 * 1024)


def dataset_task(dataset: Dataset) -> LabelTask:
    """What a dataset's label holds (:mod:`.labels`), from its stored spec."""
    return LabelTask.from_label((dataset.spec or {}).get("label"))


def load_design(uow_factory: UnitOfWorkFactory, dataset_id: str) -> Design:
    """The design matrix X (float64, n × d, rows of norm ≤ 1) and labels y of a dataset (in
    the DP core's encoding of its task: ±1.0 for a binary label), rebuilt from its chunks by
    its stored preprocessing spec.

    No access check (the job that calls it was authorised when it was created). Raises
    ``NotFoundError("dataset")`` and :class:`DatasetDeletedError`.
    """
    with uow_factory() as uow:
        dataset = uow.datasets.get(dataset_id)
    design = read_design(uow_factory, dataset)
    return design.X, design.y


def read_design(uow_factory: UnitOfWorkFactory, dataset: Dataset | None) -> PreparedDesign:
    """The design of a dataset row the caller has just read (None: not found), prepared for
    fitting (:func:`service.dp.prepare_design`): from this process's cache when the dataset
    was read before (no database access), else from its chunks, in one short transaction."""
    if dataset is None:
        raise NotFoundError("dataset")
    if dataset.deleted_at is not None:
        raise DatasetDeletedError(f"dataset {dataset.id} was deleted; its content is gone")
    cached = design_cache.get(dataset.id)
    if cached is not None:
        return cached
    prep = PreprocessingSpec.from_dict(dataset.preprocessing)
    labels = dataset_task(dataset)
    with uow_factory() as uow:
        try:
            X, y = design_from_chunks(
                prep, uow.datasets.chunk_payloads(dataset.id), dataset.n_rows, labels
            )
        except ValueError:
            # A deletion committed after the row was read, or while the chunks were.
            fresh = uow.datasets.get_fresh(dataset.id)
            if fresh is None or fresh.deleted_at is not None:
                raise DatasetDeletedError(
                    f"dataset {dataset.id} was deleted; its content is gone"
                ) from None
            raise
    X.flags.writeable = False  # fresh arrays, owned: prepared without a copy
    y.flags.writeable = False
    design = prepare_design(X, y, labels.task, labels.n_classes)
    design_cache.put(dataset.id, design)
    return design
