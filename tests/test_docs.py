"""The design document: every "docs/design.md §N.M" cited in the repository names a heading of
docs/design.md, and nothing cites the design notes that live outside the repository. Text only."""

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
SKIPPED_FOLDERS = {"__pycache__", "build", "dist", "runs", "node_modules"}

HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\s", re.MULTILINE)
CITATION = re.compile(r"docs/design\.md\s+(§\d+(?:\.\d+)*(?:(?:\s*[-–,]\s*|\s+and\s+)§?\d+(?:\.\d+)*)*)")
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


def test_the_design_document_has_numbered_sections():
    sections = HEADING.findall(DESIGN.read_text(encoding="utf-8"))
    assert len(sections) == len(set(sections)), "a section number is used twice"
    assert {"1", "1.4", "9", "10"} <= set(sections)


def test_every_citation_names_a_section_of_the_design_document():
    sections = set(HEADING.findall(DESIGN.read_text(encoding="utf-8")))
    cited, missing = 0, []
    for path, text in repository_texts():
        for match in CITATION.finditer(text):
            for section in SECTION.findall(match.group(1)):
                cited += 1
                if section not in sections:
                    line = text.count("\n", 0, match.start()) + 1
                    missing.append(f"{path.relative_to(ROOT)}:{line}: §{section}")
    assert not missing, "citations of sections docs/design.md does not have: " + ", ".join(missing)
    assert cited >= 20  # the code does cite it


def test_nothing_cites_design_notes_outside_the_repository():
    found = []
    for path, text in repository_texts():
        for match in OUTSIDE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)}")
    assert not found, "cite docs/design.md instead: " + ", ".join(found)
