"""Every "DESIGN §n" / "docs/design.md §n" cited in the repository names a section of
docs/design.md (issue 27 §4): a reader of the repository alone can follow each citation.

A citation is ``DESIGN §n`` or ``docs/design.md §n``, optionally followed by more section
numbers joined with commas or "and" (``DESIGN §2, §3``, ``DESIGN §2 and §4``); each n must
have a heading ``## n.`` in docs/design.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

#: Where citations may appear (folders are scanned recursively).
SCANNED = ("service", "tests", "migrations", "client", "benchmarks", "docs", "README.md")
#: Text files worth reading; everything else (data, images, caches) is skipped.
SUFFIXES = frozenset(
    {".py", ".md", ".txt", ".toml", ".json", ".yml", ".yaml", ".mako", ".sql", ".js", ".html"}
    | {".css", ".cfg", ".ini", ".sh", ".pyi", ".rst"}
)
SKIPPED_DIRS = frozenset({"__pycache__", ".venv", "node_modules", ".mypy_cache", ".ruff_cache"})

_SECTION = r"§\s*(\d+)"
_CITATION = re.compile(
    r"(?:\bDESIGN|docs/design\.md)\s*" + _SECTION + r"((?:\s*(?:,|and|&)\s*§\s*\d+)*)"
)
_HEADING = re.compile(r"^## (\d+)\.", re.MULTILINE)


def cited_sections(text: str) -> Iterator[tuple[int, int]]:
    """(line number, section number) of every section ``text`` cites."""
    for match in _CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield line, int(match.group(1))
        for more in re.finditer(_SECTION, match.group(2)):
            yield line, int(more.group(1))


def design_sections(text: str) -> set[int]:
    """The section numbers docs/design.md has a ``## n.`` heading for."""
    return {int(n) for n in _HEADING.findall(text)}


def scanned_files(root: Path) -> Iterable[Path]:
    for name in SCANNED:
        path = root / name
        if path.is_file():
            yield path
        elif path.is_dir():
            for child in sorted(path.rglob("*")):
                if (
                    child.is_file()
                    and child.suffix in SUFFIXES
                    and not SKIPPED_DIRS.intersection(child.relative_to(root).parts)
                ):
                    yield child


def missing_citations(root: Path, sections: set[int]) -> list[str]:
    """``path:line: §n`` for every citation of a section that has no heading."""
    missing = []
    for path in scanned_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        for line, number in cited_sections(text):
            if number not in sections:
                missing.append(f"{path.relative_to(root)}:{line}: §{number}")
    return missing


def test_the_design_document_exists_with_its_numbered_sections() -> None:
    assert DESIGN.is_file(), "docs/design.md is missing"
    assert design_sections(DESIGN.read_text(encoding="utf-8")) >= set(range(1, 9))


def test_every_cited_section_exists_in_docs_design_md() -> None:
    sections = design_sections(DESIGN.read_text(encoding="utf-8"))
    missing = missing_citations(ROOT, sections)
    assert not missing, "citations of sections docs/design.md does not have:\n" + "\n".join(missing)


def test_the_repository_cites_the_design_at_all() -> None:
    # A scan that finds nothing would pass vacuously (a wrong folder, a broken pattern).
    found = [n for path in scanned_files(ROOT) for _, n in cited_sections(path.read_text("utf-8"))]
    assert len(found) >= 10


# The spellings are assembled so that this file does not cite sections itself.
_OLD, _NEW = "DESIGN", "docs/design.md"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"see {_OLD} §2.", [2]),
        (f"see {_NEW} §7 and more", [7]),
        (f"({_OLD} §2, §3)", [2, 3]),
        (f"({_OLD} §2 and §4)", [2, 4]),
        (f"{_OLD} §1 ``jobs/``", [1]),
        (f"{_OLD}\n§5", [5]),
        ("STYLE §4.6, DESIGNER §9, design §9", []),
    ],
)
def test_citations_are_read_in_both_spellings(text: str, expected: list[int]) -> None:
    assert [n for _, n in cited_sections(text)] == expected


def test_a_citation_of_a_missing_section_fails(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "design.md").write_text("## 1. Layout\n\n## 2. Privacy\n")
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "a.py").write_text(f'"""{_OLD} §2; {_NEW} §12."""\n')
    (tmp_path / "README.md").write_text(f"{_NEW} §1\n")
    sections = design_sections((tmp_path / "docs" / "design.md").read_text())
    assert sections == {1, 2}
    assert missing_citations(tmp_path, sections) == ["service/a.py:1: §12"]


def test_every_path_docs_design_md_names_exists() -> None:
    # The design names real modules: a renamed or deleted one must update it.
    text = DESIGN.read_text(encoding="utf-8")
    named = set(
        re.findall(r"`((?:service|tests|migrations|client|benchmarks|docs)/[^`<>\s]*)`", text)
    )
    assert len(named) >= 20
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"


def test_the_lifecycle_and_node_protocol_have_their_sequence_diagrams() -> None:
    # One per runner kind (thread, process, queue), fits over nodes, and the node protocol.
    blocks = re.findall(r"```mermaid\n(.*?)```", DESIGN.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 5
    assert all(block.startswith("sequenceDiagram\n") for block in blocks)
    # Mermaid reads ';' as the end of a statement: it would cut a message in two.
    assert not [block for block in blocks if ";" in block]
