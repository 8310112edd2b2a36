"""The structure stays easy to see: package layers without cycles, modules of one concept, short functions,
the engine using drafters and stores only through their interfaces.

Pure source reading (no imports of the packages), so it runs in well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("stand_runtime", "treeopt", "treeopt_cli")
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS: dict[str, str] = {}
"""``path:function`` → why it may be longer than :data:`MAX_FUNCTION_LINES` lines (none today)."""


def source_files():
    files = [ROOT / "cli.py"]
    for package in PACKAGES:
        if (ROOT / package).is_dir():
            files += sorted((ROOT / package).rglob("*.py"))
    return files


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return found


def unit_of(module: str) -> str | None:
    """The architectural unit of a module: a subpackage of stand_runtime/treeopt, or a top-level module."""
    parts = module.split(".")
    if parts[0] not in ("stand_runtime", "treeopt"):
        return None
    if len(parts) == 1:
        return parts[0]
    candidate = ROOT / parts[0] / parts[1]
    return ".".join(parts[:2]) if candidate.is_dir() or candidate.with_suffix(".py").exists() else parts[0]


def test_units_import_each_other_without_cycles():
    """stand_runtime's parts (target, trees, store, drafters, engine, vllm and the top-level modules)
    and treeopt's (optimize, evaluate, data) form layers: no unit imports one that imports it back.
    The lazy package faces (``__init__``) only re-export and are left out."""
    graph = nx.DiGraph()
    for path in source_files():
        if path.name == "__init__.py" and path.parent.name in ("stand_runtime", "treeopt"):
            continue
        source = unit_of(module_name(path))
        if source is None:
            continue
        for target in map(unit_of, imported_modules(path)):
            if target is not None and target != source and target not in ("stand_runtime", "treeopt"):
                graph.add_edge(source, target)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"units import each other in a cycle: {cycles}"
    assert not any(t.startswith("treeopt") for s, t in graph.edges if s.startswith("stand_runtime")), \
        "stand_runtime must not import treeopt"


def test_only_the_cli_imports_rich_and_typer():
    for path in source_files():
        if path.name == "cli.py" or path.relative_to(ROOT).parts[0] == "treeopt_cli":
            continue
        heavy = {m.split(".")[0] for m in imported_modules(path)} & {"rich", "typer", "click"}
        assert not heavy, f"{path.relative_to(ROOT)} imports {heavy}"


def test_modules_and_functions_stay_small():
    too_long = []
    for path in source_files():
        text = path.read_text()
        relative = path.relative_to(ROOT)
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{relative}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and f"{relative}:{node.name}" not in LONG_FUNCTIONS:
                    too_long.append(f"{relative}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "over the size rules:\n" + "\n".join(too_long)


def test_the_engine_reads_drafters_and_stores_through_their_interfaces():
    """The engine calls no ``getattr`` on a drafter (every capability it uses is declared by
    :class:`stand_runtime.drafters.base.Drafter`), and only the store package asks whether a store is
    the native one."""
    probing, asking = [], []
    for path in source_files():
        relative = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            text = ast.unparse(node)
            if node.func.id == "getattr" and relative.parts[:2] == ("stand_runtime", "engine") and "drafter" in text:
                probing.append(f"{relative}:{node.lineno} {text}")
            if node.func.id == "isinstance" and "NativeNGramStore" in text and relative.parts[:2] != ("stand_runtime", "store"):
                asking.append(f"{relative}:{node.lineno} {text}")
    assert not probing, "the engine probes drafters:\n" + "\n".join(probing)
    assert not asking, "native or Python is decided outside store/:\n" + "\n".join(asking)


def test_the_decoding_entry_points_take_about_a_dozen_parameters():
    for relative, name in (("stand_runtime/engine/decode.py", "generate"),
                           ("stand_runtime/engine/decode.py", "generate_batch"),
                           ("stand_runtime/engine/decode.py", "decode_rows")):
        tree = ast.parse((ROOT / relative).read_text())
        function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
        arguments = function.args
        count = len(arguments.posonlyargs) + len(arguments.args) + len(arguments.kwonlyargs)
        assert count <= 13, f"{name} takes {count} parameters"


def test_drafting_imports_no_tree_sizing_latency_or_model_loading():
    """The vLLM engine process imports the drafters (its proposer drafts chains): they must not pull
    the machine's tree sizing, latency measurement, model loading or transformers in."""
    import subprocess
    import sys

    code = ("import sys, stand_runtime.drafters, stand_runtime.vllm.proposer; "
            "print(sorted(m for m in sys.modules if m in {'transformers', 'stand_runtime.sizing.tree_choice', "
            "'stand_runtime.target.latency', 'stand_runtime.target.models', 'stand_runtime.method'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


def test_every_dotted_reference_to_our_modules_resolves():
    """Docstrings, docs and monkeypatch targets name our modules by dotted path: after a move each must still
    name a module or an attribute that exists (no stale references)."""
    import importlib
    import importlib.util
    import re

    pattern = re.compile(r"\b((?:stand_runtime|treeopt|treeopt_cli)(?:\.\w+)+)")
    texts = [p for p in source_files() + sorted((ROOT / "tests").rglob("*.py")) + sorted(ROOT.glob("docs/*.md"))]
    stale = set()
    native_built = importlib.util.find_spec("stand_runtime._native") is not None
    for path in texts + [ROOT / "README.md"]:
        for name in set(pattern.findall(path.read_text(encoding="utf-8"))):
            if name.startswith("stand_runtime._native") and not native_built:
                continue  # the compiled core (pip install -e . builds it; its own tests skip without it)
            parts = name.split(".")
            target = importlib.import_module(parts[0])
            for depth, part in enumerate(parts[1:], 2):
                found = getattr(target, part, None)  # an attribute first (a function named like a module)
                if found is None:
                    try:
                        found = importlib.import_module(".".join(parts[:depth]))
                    except ModuleNotFoundError:
                        stale.add(f"{path.relative_to(ROOT)}: {name}")
                        break
                target = found
    assert not stale, "references to names that do not exist:\n" + "\n".join(sorted(stale))
