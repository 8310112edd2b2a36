"""The source states what is: no dates and no measured speedups in the packages' text (they belong in
benchmarks/results/ and docs/decisions.md)."""

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
PATTERNS = {"a date": re.compile(r"20\d\d-\d\d-\d\d"), "a measured speedup": re.compile(r"\d\.\d+x\b")}


def _sources() -> list[Path]:
    files = [path for folder in ("stand_runtime", "treeopt", "treeopt_cli") for path in (ROOT / folder).rglob("*.py")]
    return sorted(files) + [ROOT / "cli.py"]


def test_the_source_holds_no_dates_or_measured_speedups():
    hits = [f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}"
            for path in _sources()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            for what, pattern in PATTERNS.items() if pattern.search(line)]
    assert not hits, "\n".join(hits)
