"""``docs/contract.md``, the behaviour contract: every reference to one of its sections resolves.

The code, the tests, the benchmarks and the README cite the contract by section number ("the contract,
section 4"; older comments say "SPEC section 4", the same numbering), and the README links its headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "docs" / "contract.md"
#: "the contract, section 4", "the contract's section 1", "SPEC sections 2 and 5", across a line break too.
REFERENCE = re.compile(r"\b(?:SPEC|contract)(?:'s)?,?\s+(?:#:\s+)?sections?\s+(\d+(?:(?:,\s*|\s+and\s+)\d+)*)")
#: A markdown link to a heading of the contract.
LINK = re.compile(r"\]\((?:\.\./)?docs/contract\.md#([^)]+)\)")


def _headings() -> dict[int, str]:
    """Section number -> its GitHub anchor, e.g. ``4 -> "4-schedules"``."""
    found = re.findall(r"^## (\d+)\. (.+)$", CONTRACT.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {int(n): re.sub(r"[^\w\- ]", "", f"{n}. {title}".lower()).replace(" ", "-") for n, title in found}


def _sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md"]
    for folder in ("hba_augment", "tests", "benchmarks"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def _references(text: str) -> list[int]:
    return [int(n) for match in REFERENCE.finditer(text) for n in re.findall(r"\d+", match.group(1))]


def test_the_contract_has_sections_1_to_6():
    assert sorted(_headings()) == [1, 2, 3, 4, 5, 6]


def test_every_section_reference_names_a_section_of_the_contract():
    headings = _headings()
    dangling, cited = {}, set()
    for path in _sources():
        if path == Path(__file__):
            continue
        numbers = _references(path.read_text(encoding="utf-8"))
        cited.update(numbers)
        bad = sorted(set(numbers) - set(headings))
        if bad:
            dangling[str(path.relative_to(ROOT))] = bad
    assert dangling == {}
    assert cited == set(headings)  # the scan sees references to every section, so it reads the sources


def test_every_link_to_the_contract_names_a_heading():
    anchors = set(_headings().values())
    links = [a for path in _sources() for a in LINK.findall(path.read_text(encoding="utf-8"))]
    assert len(links) >= 3 and set(links) <= anchors, sorted(set(links) - anchors)
    assert "](docs/contract.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("text", "numbers"), [
    ("(the contract, section 4)", [4]),
    ("the contract's section 1 as", [1]),
    ("HBAPolicy (the contract, sections 2 and 5)", [2, 5]),
    ("strengths (SPEC\n#: section 7); version", [7]),
    ("paper section 3, issue 10, section 5", []),
])
def test_the_scan_reads_every_form(text, numbers):
    assert _references(text) == numbers


def test_the_search_section_names_every_search_option():
    # Section 6 lists the search's settings; an option added to the command line is added there too.
    from hba_augment.search.cli import build_parser

    section = CONTRACT.read_text(encoding="utf-8").split("## 6. ")[1]
    flags = {flag for action in build_parser()._actions for flag in action.option_strings
             if flag.startswith("--") and flag not in ("--help", "--no-channels-last")}
    assert len(flags) > 30
    assert sorted(flag for flag in flags if flag not in section) == []
