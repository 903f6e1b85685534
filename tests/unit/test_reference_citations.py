"""Every citation of the upstream reference notes names a note and a section that exist.

Code and guides cite what upstream does as `docs/reference/<note>.md <section>` (e.g.
`docs/reference/upstream-recursive.md 2.2`, `... 10.2-10.5`, `... 2, 5 and 8`, `... A` for an appendix); a guide
under docs/ may link `reference/<note>.md` relatively. A section exists when the note has a heading `## <section>`
(or `###`, `####`), with or without a trailing dot. A reference that lives outside the repository cannot be cited:
no file may name the old, unpublished `upstream.md`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
SCANNED = ("src", "tests", "benchmarks", "docs", "rules", "workflow", "config", "profiles", "cluster")
TOP_FILES = ("Snakefile", "README.md", "setup.sh", "pyproject.toml")
SUFFIXES = {".py", ".md", ".smk", ".yaml", ".yml", ".sh", ".rst", ".toml", ".txt", ".cfg"}

SECTION = r"(?:\d+(?:\.\d+)*|[A-Z])\b"
SPAN = rf"{SECTION}(?:-{SECTION})?"
CITATION = re.compile(
    r"(?:docs/)?reference/(?P<note>[\w.-]+\.md)"
    r"\)?(?:[\s#]+(?:sections?|appendix)\b)?"  # a Markdown link's ")" and an optional "section(s)"
    rf"(?:[\s#]+(?P<sections>{SPAN}(?:(?:,\s*|\s+and\s+){SPAN})*))?",
    re.IGNORECASE,
)
# the old reference, outside the repository (spelt in pieces so that this file does not cite it)
BARE = re.compile(r"(?<![\w-])upstream" + r"\.md|\bupstream section \d", re.IGNORECASE)
HEADING = re.compile(r"^#{2,4}\s+(\d+(?:\.\d+)*|[A-Z])\.?\s", re.MULTILINE)


def sections_of(note: Path) -> set[str]:
    """The section numbers of a reference note: its numbered `##`-`####` headings."""
    return set(HEADING.findall(note.read_text(encoding="utf-8")))


def problems(text: str, where: str, reference: Path = REFERENCE) -> tuple[list[str], int]:
    """(what is wrong with the citations in `text`, how many citations it holds)."""
    found: list[str] = []
    count = 0
    if "upstream" not in text.lower() and "reference/" not in text:
        return found, count
    for match in BARE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        found.append(f"{where}:{line}: cites {match.group(0)!r}, which is not in the repository")
    for match in CITATION.finditer(text):
        count += 1
        line = text.count("\n", 0, match.start()) + 1
        note = reference / match.group("note")
        if not note.is_file():
            found.append(f"{where}:{line}: {match.group(0)!r} names a note that does not exist")
            continue
        if not match.group("sections"):
            continue
        known = sections_of(note)
        for part in re.split(r",\s*|\s+and\s+", match.group("sections")):
            for section in part.split("-"):
                if section.upper() not in known:
                    found.append(f"{where}:{line}: {match.group(0)!r}: {note.name} has no section {section}")
    return found, count


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if "__pycache__" in path.parts or not path.is_file() or path.suffix not in SUFFIXES:
                continue
            files.append(path)
    return [path for path in files if path.resolve() != Path(__file__).resolve()]


def test_every_citation_names_a_note_and_a_section_that_exist():
    found: list[str] = []
    citations = 0
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        wrong, count = problems(text, str(path.relative_to(ROOT)))
        found += wrong
        citations += count
    assert not found, "\n".join(found)
    # the pattern must actually see the citations: the code cites the notes about fifty times
    assert citations >= 40, citations


def test_the_notes_number_their_sections():
    recursive = sections_of(REFERENCE / "upstream-recursive.md")
    assert {"1", "1.8", "2.2", "5.2", "8.3", "10.4", "11.2", "12", "A"} <= recursive
    assert {"1", "2.1", "9"} <= sections_of(REFERENCE / "upstream-varc.md")


@pytest.mark.parametrize(
    "text",
    [
        "the crop (docs/reference/upstream-recursive.md 99.1)",  # no such section
        "the crop (docs/reference/upstream-recursive.md 10.2-10.99)",  # the range's far end is missing
        "votes (docs/reference/upstream-recursive.md 10.4 and 42)",  # the second of a list is missing
        "see docs/reference/upstream-nowhere.md 1.1",  # no such note
        "# upstream" + ".md 1.8: what each transform makes",  # the old, unpublished reference
        "One call is one ACT step (upstream section 3.4).",
        "the commits of reference/upstream" + ".md",
        "docs/reference/upstream-recursive.md\n    # B",  # an appendix that does not exist, across a line break
    ],
)
def test_a_wrong_citation_is_reported(text):
    found, _ = problems(text, "planted.py")
    assert found, text


@pytest.mark.parametrize(
    "text",
    [
        "(docs/reference/upstream-recursive.md 2.4 and 8.3)",
        "(docs/reference/upstream-recursive.md 10.2-10.5): a row",
        "(docs/reference/upstream-recursive.md 2, 5 and 8): one optimizer step",
        "(docs/reference/upstream-recursive.md 10.8, item 2)",
        "every file of docs/reference/upstream-recursive.md A.",
        "a stream (docs/reference/upstream-recursive.md\n1.10). Every call",
        "[reference](reference/upstream-varc.md) section 3 is diffusers'",
        "What upstream does is in [reference/upstream-varc.md](reference/upstream-varc.md).",
    ],
)
def test_a_right_citation_passes(text):
    found, count = problems(text, "right.py")
    assert not found and count >= 1, found
