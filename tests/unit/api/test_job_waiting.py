"""Reading ``Prefer: wait=N`` (RFC 7240): what counts as a wait, and what is ignored."""

from __future__ import annotations

import pytest

from service.api.job_waiting import MAX_WAIT_SECONDS, preferred_wait


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("wait=5", 5),
        ("wait=0", 0),
        ("WAIT = 7", 7),
        ('wait="9"', 9),
        ("respond-async, wait=10", 10),
        ("handling=lenient; x=1, wait=3", 3),
        ("wait=3; foo=bar", 3),
        ("wait=100", int(MAX_WAIT_SECONDS)),
        ("wait=999999999", int(MAX_WAIT_SECONDS)),
    ],
)
def test_a_wait_preference_is_read_and_capped(header: str, seconds: int) -> None:
    assert preferred_wait(header) == seconds


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "respond-async",
        "wait",
        "wait=",
        "wait=-1",
        "wait=1.5",
        "wait=soon",
        "waiting=5",
        "wait=1e3",
        "wait=1234567890",
    ],
)
def test_anything_else_asks_for_no_wait(header: str | None) -> None:
    assert preferred_wait(header) is None
