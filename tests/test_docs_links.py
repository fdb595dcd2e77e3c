"""The documentation the code cites is in the repository: every ``docs/<page>.md`` named in the library, the
benchmarks or the README exists, and every section cited as ``docs/<page>.md, "<Section>"`` is a heading of it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r'docs/([a-z_]+\.md)(?:, "([^"]+)")?')


def _citations() -> list[tuple[Path, str, str | None]]:
    files = [*ROOT.joinpath("tgpflow").rglob("*.py"), *ROOT.joinpath("benchmarks").rglob("*.py"), ROOT / "README.md"]
    return [(f, m.group(1), m.group(2) and " ".join(m.group(2).split()))  # a section name wrapped in a docstring
            for f in files for m in CITATION.finditer(f.read_text(encoding="utf-8"))]


def _headings(page: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines()
            if line.startswith("#")}


def test_every_cited_page_and_section_exists():
    cited = _citations()
    assert len(cited) > 50  # the pattern finds the citations (a broken pattern would find none and pass)
    missing = []
    for source, page, section in cited:
        path = ROOT / "docs" / page
        if not path.is_file():
            missing.append(f"{source.relative_to(ROOT)}: docs/{page} does not exist")
        elif section is not None and section not in _headings(path):
            missing.append(f"{source.relative_to(ROOT)}: docs/{page} has no section {section!r}")
    assert not missing, "\n".join(missing)


def test_a_missing_section_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## The fit\n\ntext\n", encoding="utf-8")
    assert _headings(page) == {"Title", "The fit"}
    assert CITATION.search('see docs/page.md, "The fit"').groups() == ("page.md", "The fit")
