"""The documentation: every "docs/PAGE.md §N.M" cited in the repository names a numbered heading of
that page; the site builds with ``mkdocs build --strict`` (a broken link or a page missing from the
navigation fails); the CLI reference page is what the Typer app prints; the README stays short and
keeps its Quickstart; every results file the docs name exists."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SKIPPED_FOLDERS = {"__pycache__", "build", "dist", "runs", "node_modules", "site"}

HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\s", re.MULTILINE)
CITATION = re.compile(r"docs/([\w/-]+)\.md\s+(§\d+(?:\.\d+)*(?:\s*[-–]\s*\d+(?:\.\d+)*)?"
                      r"(?:(?:\s*,\s*|\s+and\s+)§\d+(?:\.\d+)*(?:\s*[-–]\s*\d+(?:\.\d+)*)?)*)")
SECTION = re.compile(r"\d+(?:\.\d+)*")
# the notes outside the repository (spelled in pieces so that this file does not match itself)
OUTSIDE = re.compile(r"\bDESIGN(?:\.md|\s*§)|" + "TRANSFORMERS" + "-NOTES|" + "VLLM" + "-NOTES")


def repository_texts():
    """Every .py and .md file of the repository (hidden folders, virtual environments and build
    outputs skipped), with its text."""
    for folder, folders, files in os.walk(ROOT):
        folders[:] = sorted(name for name in folders
                            if not name.startswith(".") and name not in SKIPPED_FOLDERS and not name.endswith(".egg-info"))
        for name in sorted(files):
            if name.endswith((".py", ".md")):
                path = Path(folder) / name
                yield path, path.read_text(encoding="utf-8")


def page_sections() -> dict[str, set[str]]:
    """Numbered headings per page (``"algorithms"`` → {"2", "2.1", ...})."""
    return {str(path.relative_to(DOCS).with_suffix("")): set(HEADING.findall(path.read_text(encoding="utf-8")))
            for path in DOCS.rglob("*.md")}


def test_section_numbers_are_unique_across_the_pages():
    seen: dict[str, str] = {}
    for page, sections in page_sections().items():
        for section in sections:
            assert section not in seen, f"§{section} is a heading of both {seen[section]} and {page}"
            seen[section] = page
    assert {"1", "1.4", "2", "4.3", "6.6", "7.7", "8.1", "9", "10"} <= set(seen)


def test_every_citation_names_a_numbered_heading_of_its_page():
    pages = page_sections()
    cited, missing = 0, []
    for path, text in repository_texts():
        if path == Path(__file__):
            continue
        for match in CITATION.finditer(text):
            page = match.group(1)
            for section in SECTION.findall(match.group(2)):
                cited += 1
                if section not in pages.get(page, ()):
                    line = text.count("\n", 0, match.start()) + 1
                    missing.append(f"{path.relative_to(ROOT)}:{line}: docs/{page}.md §{section}")
    assert not missing, "citations of headings the docs do not have: " + ", ".join(missing)
    assert cited >= 60  # the code does cite them


def test_nothing_cites_design_notes_outside_the_repository_or_the_old_design_file():
    found = []
    old = "docs/" + "design.md"
    for path, text in repository_texts():
        for match in list(OUTSIDE.finditer(text)) + list(re.finditer(re.escape(old), text)):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)}")
    assert not found, "cite a page of docs/ instead: " + ", ".join(found)


def test_the_site_builds_strictly(tmp_path):
    """A broken link, a missing anchor or a page left out of the navigation fails the build."""
    pytest.importorskip("mkdocs", reason="mkdocs comes with the test extra: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "cli" / "index.html").is_file()


def test_the_cli_reference_page_is_current():
    """docs/cli.md is what the Typer app prints; rewrite it with ``python -m treeopt_cli.reference > docs/cli.md``."""
    from treeopt_cli.reference import reference_markdown

    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert page == reference_markdown(), "docs/cli.md is stale: python -m treeopt_cli.reference > docs/cli.md"
    assert "PROMPT  Prompt text" in page and "<str>" not in page and "<list[str]>" not in page


def test_the_readme_is_short_and_keeps_its_quickstart():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    assert len((DOCS / "architecture.md").read_text(encoding="utf-8").splitlines()) <= 300
    start = lines.index("## Quickstart")
    block = lines[lines.index("```sh", start) + 1:]
    block = block[:block.index("```")]
    assert len(block) == 2 and "treeopt calibrate" in block[0] and "python -m pytest" in block[1]
    assert '".[test]"' in block[1]  # the test extra brings mkdocs for the site's build


def test_every_results_file_the_docs_name_exists():
    """The JSON files the current results name (a backticked file name on docs/results/index.md, a link
    in the README) are in benchmarks/results/."""
    results = ROOT / "benchmarks" / "results"
    named = re.findall(r"`([\w.-]+\.json)`", (DOCS / "results" / "index.md").read_text(encoding="utf-8"))
    named += re.findall(r"\]\(benchmarks/results/([\w.-]+\.json)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(named) >= 10
    missing = sorted(name for name in set(named) if not (results / name).is_file())
    assert not missing, "results files the docs name but benchmarks/results/ lacks: " + ", ".join(missing)
