"""The command line shows names inert: a bidi control in a dataset's or study's name is shown
as its code point (it can neither reorder the line nor disguise the name), and brackets in a
name are printed as they are, never read as Rich markup."""

from __future__ import annotations

import io

import pytest
from privfit_client import cli
from rich.console import Console


def test_tables_show_names_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    printed = io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=printed, width=200, color_system=None))
    cli._table(
        "study \u2067wards\u2069",
        ("id", "name"),
        [("d1", "Lab \u202efdp.exe"), ("d2", "[bold]x[/] [/]"), ("d3", None)],
    )
    text = printed.getvalue()
    assert not set(text) & set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2069")
    assert "Lab [U+202E]fdp.exe" in text
    assert "study [U+2067]wards[U+2069]" in text
    assert "[bold]x[/] [/]" in text
