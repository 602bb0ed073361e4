"""The documentation, kept honest: docs/design.md's crash-point table is the one generated
from `engine/faults.POINTS`, README.md stays a README (at most 300 lines), every relative
link in README.md and docs/*.md resolves, and README's test command is the one CI runs.

In-process and quick: part of the fast lane (no marker)."""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from chronos_git.engine import crash_points, faults

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DESIGN = REPO / "docs" / "design.md"
DOCS = [README] + sorted((REPO / "docs").glob("*.md"))
MAX_README_LINES = 300


# ------------------------------------------------------------ crash-point table
def test_every_fault_point_says_what_the_next_start_does():
    missing = set(faults.POINTS) - set(crash_points.NEXT_START)
    stale = set(crash_points.NEXT_START) - set(faults.POINTS)
    assert not missing, f"add these points to NEXT_START in engine/crash_points.py: {sorted(missing)}"
    assert not stale, f"NEXT_START names points faults.POINTS no longer has: {sorted(stale)}"


def test_design_md_crash_point_table_is_generated_from_faults_points():
    text = DESIGN.read_text(encoding="utf-8")
    assert crash_points.section(text) == crash_points.crash_point_table(), (
        f"docs/design.md's crash-point table is out of date: run `{crash_points.COMMAND}`")


def test_the_table_has_one_row_per_point_in_order():
    rows = [line for line in crash_points.crash_point_table().splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(faults.POINTS)


def test_the_generator_rewrites_only_the_section_between_the_markers(tmp_path):
    doc = tmp_path / "design.md"
    doc.write_text(f"# before\n\n{crash_points.START}\nold table\n{crash_points.END}\n\nafter\n")
    assert crash_points.main(["--check", str(doc)]) == 1
    assert crash_points.main([str(doc)]) == 0
    text = doc.read_text()
    assert text == (f"# before\n\n{crash_points.START}\n{crash_points.crash_point_table()}"
                    f"{crash_points.END}\n\nafter\n")
    assert crash_points.main(["--check", str(doc)]) == 0


def test_the_generator_refuses_a_document_without_markers(tmp_path):
    doc = tmp_path / "design.md"
    doc.write_text("# no markers here\n")
    with pytest.raises(ValueError):
        crash_points.main([str(doc)])
    assert doc.read_text() == "# no markers here\n"


# ---------------------------------------------------------------- README size
def test_readme_is_at_most_300_lines():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, (f"README.md has {n} lines (at most {MAX_README_LINES}): "
                                   "move detail into docs/ and link it")


# ---------------------------------------------------------------------- links
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(text: str) -> str:
    """`text` without fenced code blocks and inline code spans (links there are not links)."""
    return _CODE.sub("", _FENCE.sub("", text))


def _links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text(encoding="utf-8")))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    keep = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LMN":
            keep.append("-" if ch == " " else ch)
    return "".join(keep)


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_link_finder_sees_links_and_skips_code():
    text = "a [x](one.md) `[y](two.md)` ![i](p.png \"t\")\n```\n[z](three.md)\n```\n[w](four.md#a)\n"
    assert _LINK.findall(_prose(text)) == ["one.md", "p.png", "four.md#a"]
    assert _slug("The witness file (`journal_refs/witness.py`)") == "the-witness-file-journal_refswitnesspy"
    assert _slug("Wind tunnel: crashes, power cuts") == "wind-tunnel-crashes-power-cuts"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_something_that_exists(doc):
    bad = []
    for target in _links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):       # http:, https:, mailto:, file:
            continue
        where, _, anchor = target.partition("#")
        dest = (doc.parent / where).resolve() if where else doc
        if REPO not in dest.parents and dest != REPO:
            bad.append(f"{target}: outside the repository")
        elif not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.relative_to(REPO)}")
    assert not bad, f"{doc.relative_to(REPO)}:\n" + "\n".join(bad)


# -------------------------------------------------------------- the two commands
def test_readme_names_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert "bash scripts/test.sh" in text
    assert "bash scripts/demo.sh" in text
    assert (REPO / "scripts" / "test.sh").exists() and (REPO / "scripts" / "demo.sh").exists()


def test_ci_runs_the_readme_test_command():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    calls = [line for line in lines if re.match(r"bash scripts/test\.sh(\s|$)", line)]
    assert calls, ".ci/run no longer calls `bash scripts/test.sh`, the test command README names"
