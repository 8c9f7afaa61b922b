"""DatasetRepository: datasets and their content chunks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import delete, func, select

from service.db.errors import translate_integrity_errors
from service.db.models import (
    Dataset,
    DatasetChunk,
)
from service.db.repositories.base import Repository, rowcount


class DatasetRepository(Repository[Dataset]):
    """Datasets and their content chunks."""

    model = Dataset

    def add_chunk(self, dataset_id: str, *, seq: int, n_rows: int, payload: bytes) -> None:
        """Store one block of encoded content (flushed now, so memory stays flat)."""
        chunk = DatasetChunk(dataset_id=dataset_id, seq=seq, n_rows=n_rows, payload=payload)
        self.session.add(chunk)
        with translate_integrity_errors():
            self.session.flush()
        self.session.expunge(chunk)  # the session must not keep every block in memory

    def chunk_payloads(self, dataset_id: str) -> Iterator[bytes]:
        """The content blocks in order, streamed one at a time."""
        query = (
            select(DatasetChunk.payload)
            .where(DatasetChunk.dataset_id == dataset_id)
            .order_by(DatasetChunk.seq)
            .execution_options(yield_per=1)
        )
        yield from self.session.scalars(query)

    def delete_chunks(self, dataset_id: str) -> int:
        """Remove a dataset's content; returns how many blocks were removed."""
        result = self.session.execute(
            delete(DatasetChunk).where(DatasetChunk.dataset_id == dataset_id)
        )
        return rowcount(result)

    def _owned(self, query: Any, owner_site_id: str | None, include_deleted: bool) -> Any:
        if owner_site_id is not None:
            query = query.where(Dataset.owner_site_id == owner_site_id)
        if not include_deleted:
            query = query.where(Dataset.deleted_at.is_(None))
        return query

    def list_page(
        self, *, owner_site_id: str | None, include_deleted: bool, limit: int, offset: int
    ) -> Sequence[Dataset]:
        """Datasets newest first, of one site (or all with ``owner_site_id=None``)."""
        query = self._owned(select(Dataset), owner_site_id, include_deleted)
        query = query.order_by(Dataset.created_at.desc(), Dataset.id).limit(limit).offset(offset)
        return self.session.scalars(query).all()

    def count(self, *, owner_site_id: str | None, include_deleted: bool) -> int:
        """How many datasets :meth:`list_page` pages through."""
        query = self._owned(
            select(func.count()).select_from(Dataset), owner_site_id, include_deleted
        )
        return int(self.session.scalar(query) or 0)
