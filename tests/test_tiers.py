"""The test tiers' selection (tests/conftest.py): a module marked heavy as a whole is not even
imported when ``-m`` deselects every item it could hold, and is imported otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import deselects_every_item, module_marks


@pytest.mark.parametrize(
    ("source", "marks"),
    [
        ("pytestmark = [pytest.mark.slow, pytest.mark.heavy]\n", {"slow", "heavy"}),
        ("pytestmark = pytest.mark.heavy\n", {"heavy"}),
        (
            'pytestmark = (pytest.mark.heavy, pytest.mark.filterwarnings("ignore"))\n',
            {"heavy", "filterwarnings"},
        ),
        # heavy on one test only: the module's other tests belong to the default tier
        ("pytestmark = pytest.mark.slow\n\n@pytest.mark.heavy\ndef test_x(): ...\n", {"slow"}),
        ("import pytest\n", set()),
    ],
)
def test_module_marks_reads_pytestmark_without_importing(
    tmp_path: Path, source: str, marks: set[str]
) -> None:
    path = tmp_path / "test_module.py"
    path.write_text("import pytest\n\n" + source + "raise AssertionError('imported')\n")
    assert module_marks(path) == marks


@pytest.mark.parametrize(
    ("markexpr", "marks", "deselected"),
    [
        ("not heavy", {"heavy"}, True),
        ("heavy", {"heavy"}, False),
        ("not statistical and not slow and not postgres", {"slow", "heavy"}, True),
        # an item of the module may carry marks of its own
        ("statistical", {"heavy"}, False),
        ("not heavy or statistical", {"heavy"}, False),
        ("heavy and not postgres", {"heavy", "postgres"}, True),
        ("heavy and not postgres", {"heavy"}, False),
    ],
)
def test_a_module_is_left_out_only_when_no_item_of_it_can_be_selected(
    markexpr: str, marks: set[str], deselected: bool
) -> None:
    assert deselects_every_item(markexpr, frozenset(marks)) is deselected
