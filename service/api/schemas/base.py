"""Base classes for request and response models.

Request models are strict (no coercion: `false` is not a number, `"1"` is not an integer),
refuse unknown fields, and every string in them (at any depth) is refused when it
contains a NUL character or an unpaired surrogate: neither can be stored in PostgreSQL, so they
must be a 422 at the edge, never a 500 in the database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["RequestModel", "ResponseModel", "check_storable_text", "page_read"]


def _bad_text(value: str) -> bool:
    if "\x00" in value:
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_storable_text(value: Any) -> None:
    """Raise ``ValueError`` when any string inside ``value`` cannot be stored as UTF-8 text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _bad_text(item):
                raise ValueError("text must not contain NUL characters or unpaired surrogates")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


class RequestModel(BaseModel):
    """Base of every request body."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        check_storable_text(data)
        return data


class ResponseModel(BaseModel):
    """Base of every response body; reads ORM objects' attributes."""

    model_config = ConfigDict(from_attributes=True)


Item = TypeVar("Item")
ItemOut = TypeVar("ItemOut", covariant=True)
PageModel = TypeVar("PageModel", bound=BaseModel)


class Page(Protocol[ItemOut]):
    """A domain page: some items and how many there are in all."""

    @property
    def items(self) -> Sequence[ItemOut]: ...

    @property
    def total(self) -> int: ...


def page_read(
    model: type[PageModel],
    page: Page[Item],
    read: Callable[[Item], Any],
    *,
    limit: int,
    offset: int,
) -> PageModel:
    """The response model of one page: each item mapped by ``read``, the total, the window."""
    return model(items=[read(i) for i in page.items], total=page.total, limit=limit, offset=offset)
