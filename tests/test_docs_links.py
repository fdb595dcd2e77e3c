"""The documentation the code cites is in the repository: every ``docs/<page>.md`` named in the library, the tests,
the benchmarks or the README exists, every section cited as ``docs/<page>.md, "<Section>"`` (or ``"<A>" and "<B>"``)
is a heading of it, every relative link of a Markdown page resolves, and nothing names a file outside the repository
(the notes the project was started from, a sibling folder of data or papers)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r'docs/([a-z_/]+\.md)((?:(?:,|,? and)\s+"[^"]+")*)')
SECTION = re.compile(r'"([^"]+)"')
LINK = re.compile(r"\]\(([\w./-]+\.[a-z]+)(?:#[^)]*)?\)")  # a relative link to a file
#: Names of files that are not in the repository, which nothing may send a reader to.
OUTSIDE = re.compile(r"\b(MATH|DESIGN|STYLE)\.md\b|\.\./shared\b|\bshared/(data|seeds)\b|\b[Ss]eeds? 00[0-4]\b")


def _sources() -> list[Path]:
    return [*ROOT.joinpath("tgpflow").rglob("*.py"), *ROOT.joinpath("benchmarks").rglob("*.py"),
            *ROOT.joinpath("tests").rglob("*.py"), ROOT / "README.md", *ROOT.joinpath("docs").rglob("*.md"),
            *ROOT.joinpath("pipelines").rglob("*"), ROOT / "pyproject.toml", ROOT / "Makefile"]


def _citations(text: str) -> list[tuple[str, list[str]]]:
    return [(m.group(1), [" ".join(s.split()) for s in SECTION.findall(m.group(2))])  # a name wrapped in a docstring
            for m in CITATION.finditer(text)]


def _headings(page: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def test_every_cited_page_and_section_exists():
    cited = [(f, page, sections) for f in _sources() if f.is_file() and f != Path(__file__)
             for page, sections in _citations(f.read_text(encoding="utf-8"))]
    assert len(cited) > 200  # the pattern finds the citations (a broken pattern would find none and pass)
    missing = []
    for source, page, sections in cited:
        path = ROOT / "docs" / page
        if not path.is_file():
            missing.append(f"{source.relative_to(ROOT)}: docs/{page} does not exist")
            continue
        missing += [f"{source.relative_to(ROOT)}: docs/{page} has no section {s!r}" for s in sections
                    if s not in _headings(path)]
    assert not missing, "\n".join(missing)


def test_every_relative_link_of_the_pages_resolves():
    pages = [ROOT / "README.md", *ROOT.joinpath("docs").rglob("*.md"), ROOT / "tests" / "data" / "README.md"]
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in pages for target in LINK.findall(page.read_text())
              if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()]
    assert not broken, "\n".join(broken)


def test_nothing_names_a_file_outside_the_repository():
    named = [f"{f.relative_to(ROOT)}:{i}: {line.strip()[:100]}" for f in _sources()
             if f.is_file() and f != Path(__file__)
             for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if OUTSIDE.search(line)]
    assert not named, "\n".join(named)


def test_the_patterns_find_what_they_look_for(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## The fit\n\ntext\n", encoding="utf-8")
    assert _headings(page) == {"Title", "The fit"}
    assert _citations('see docs/page.md, "The fit"') == [("page.md", ["The fit"])]
    assert _citations('(docs/cli/fit.md, "A" and "B\n    C")') == [("cli/fit.md", ["A", "B C"])]
    assert _citations('docs/m.md, "A", "B" and "C", item A5') == [("m.md", ["A", "B", "C"])]
    assert LINK.findall("[a](gp_tilted.md#held-out), [b](https://x.org), [c](x_i)") == ["gp_tilted.md"]
    assert all(OUTSIDE.search(t) for t in ("MATH.md §2", "see DESIGN.md", "../shared/data", "seed 003 §IV"))
    assert not OUTSIDE.search("random_state=003 and seeds=3")
