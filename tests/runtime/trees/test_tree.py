"""Static draft trees: validation errors name the path; masks and positions of a hand-checked tree."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from stand_runtime import DraftTree, StandError, load_tree, save_tree
from stand_runtime.trees.tree import tree_attention_mask, tree_position_ids
from stand_runtime.trees.tree_io import parse_tree
from stand_runtime import TreeFile, bundled_trees

FIVE = [[0], [1], [0, 0], [0, 1], [1, 0]]


def test_five_node_tree_arrays_and_masks_by_hand():
    # given out of order: the tree sorts to breadth-first order
    tree = DraftTree.from_paths([[0, 1], [1], [0], [1, 0], [0, 0]])
    assert tree.paths == ((0,), (1,), (0, 0), (0, 1), (1, 0))
    assert tree.parents.tolist() == [-1, 0, 0, 1, 1, 2]
    assert tree.depths.tolist() == [0, 1, 1, 2, 2, 2]
    assert tree.ranks.tolist() == [-1, 0, 1, 0, 1, 0]
    assert tree.children == ((1, 2), (3, 4), (5,), (), (), ())
    expected = [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],
        [1, 0, 1, 0, 0, 1],
    ]
    assert tree.ancestor_mask.int().tolist() == expected
    mask = tree_attention_mask(tree.ancestor_mask, prefix_len=3)
    assert mask.shape == (1, 1, 6, 9) and mask.dtype == torch.float32
    allowed = (mask[0, 0] == 0).int().tolist()
    assert allowed == [[1, 1, 1] + row for row in expected]
    assert (mask[0, 0][mask[0, 0] != 0] == torch.finfo(torch.float32).min).all()
    assert tree_position_ids(tree.depths, 3).tolist() == [[3, 4, 4, 5, 5, 5]]
    assert tree.num_nodes == 5 and tree.max_depth == 2
    assert tree.nodes_per_depth() == [2, 3] and tree.width_per_depth() == [2, 2]


def test_networkx_export():
    tree = DraftTree.from_paths(FIVE)
    graph = tree.to_networkx([0.5, 0.2, 0.3, 0.1, 0.05])
    assert graph.number_of_nodes() == 6 and graph.number_of_edges() == 5
    assert sorted(graph.successors(1)) == [3, 4]
    assert graph.nodes[5]["path"] == (1, 0) and graph.nodes[5]["value"] == 0.05


@pytest.mark.parametrize(
    "paths, message",
    [
        ([[0], [0, 0, 0]], r"path \[0, 0, 0\] has no parent \[0, 0\]"),
        ([[0], [2]], r"path \[2\] has no elder sibling \[1\]"),
        ([[0], [1], [0]], r"duplicate path \[0\]"),
        ([[0], [-1]], r"path \[-1\] has a negative rank"),
        ([[0], [10]], r"path \[10\] has rank >= 10"),
        ([[0], []], r"empty path"),
        ([[0], [0.5]], r"not a list of integer ranks"),
    ],
)
def test_invalid_paths_name_the_path(paths, message):
    with pytest.raises(StandError, match=message) as info:
        DraftTree.from_paths(paths)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"format": "stand-tree", "version": 2, "paths": [[0]]}, "version 2 is not supported"),
        ({"format": "stand-tree", "paths": [[0]]}, "'version' is a required property"),
        ({"format": "other", "version": 1, "paths": [[0]]}, r"\$.format"),
        ({"format": "stand-tree", "version": 1, "paths": [[0], [0, "a"]]}, r"\$.paths\[1\]\[1\]"),
        ({"format": "stand-tree", "version": 1, "paths": [[0], [1, 0, 0]]}, r"path \[1, 0, 0\] has no parent"),
        ({"format": "stand-tree", "version": 1, "paths": [[0]], "expected_acceptance": [0.1, 0.2]}, "2 values for 1 paths"),
        ("not a tree", "bad tree JSON"),
        (["a", "b"], r"\$\[0\]: 'a' is not of type 'array' \(a tree file looks like \{\"format\": \"stand-tree\""),
        ([[i] for i in range(2)] + ["b"] + [[i] for i in range(3, 11)] + ["a"], r"\$\[2\]: 'b'"),  # the first, not [11]
    ],
)
def test_invalid_json_is_one_line_error(tmp_path, data, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(StandError, match=message) as info:
        load_tree(path)
    assert "\n" not in str(info.value) and "bad.json" in str(info.value)


def test_not_json_and_missing_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("{oops")
    with pytest.raises(StandError, match="not JSON"):
        load_tree(path)
    with pytest.raises(StandError, match="neither a file nor a bundled name .*stand-smollm2-humaneval \\(a calibration and its tree family\\)"):
        load_tree(tmp_path / "missing.json")
    with pytest.raises(StandError, match="dynamic trees .* apply to decoding only"):
        load_tree("dynamic-80")
    with pytest.raises(StandError, match="auto is sized for this machine when decoding starts"):
        load_tree("auto")


def test_round_trip_versioned_and_choices(tmp_path):
    tree = DraftTree.from_paths(FIVE)
    alpha = (0.6, 0.2, 0.3, 0.05, 0.04)
    meta = {"model": "m", "samples": 3}
    out = save_tree(TreeFile(tree, alpha, meta), tmp_path / "t.json")
    loaded = load_tree(out)
    assert loaded.tree.paths == tree.paths
    assert loaded.expected_acceptance == pytest.approx(alpha)
    assert loaded.metadata == meta
    assert loaded.expected_acceptance_length == pytest.approx(1 + sum(alpha))
    raw = json.loads(out.read_text())
    assert raw["format"] == "stand-tree" and raw["version"] == 1
    choices = save_tree(TreeFile(tree), tmp_path / "c.json", fmt="choices")
    assert json.loads(choices.read_text()) == [list(p) for p in tree.paths]
    assert load_tree(choices).tree.paths == tree.paths
    # trees compare (and hash) by their paths, in whatever order they were given
    assert load_tree(choices).tree == tree == DraftTree.from_paths(reversed(FIVE)) != DraftTree.chain(5)
    assert len({tree, load_tree(out).tree}) == 1
    # alpha follows its path when the file lists paths out of breadth-first order
    shuffled = {"format": "stand-tree", "version": 1, "paths": [[1], [0]], "expected_acceptance": [0.2, 0.7]}
    assert parse_tree(shuffled).expected_acceptance == (0.7, 0.2)


def test_save_is_atomic_and_reports_unwritable(tmp_path):
    with pytest.raises(StandError, match="does not exist"):
        save_tree(TreeFile(DraftTree.from_paths(FIVE)), tmp_path / "nope" / "t.json")
    assert list(tmp_path.iterdir()) == []


BUNDLED = {  # name: (nodes per depth, widest node per depth, calibrated)
    "heuristic-80": ([8, 21, 25, 15, 8, 3], [8, 9, 6, 4, 3, 2], False),
    "stand-smollm2-humaneval-80": ([9, 9, 10, 8, 7, 7, 8, 7, 4, 2] + [1] * 9, [9, 4, 3, 3, 2, 2, 2] + [1] * 12, True),
}


def test_a_trees_folder_where_the_user_runs_does_not_hide_the_bundled_trees(tmp_path):
    """The bundled trees were the package ``trees``: a user's own ``trees/`` folder in the working
    directory (a package or a namespace one) shadowed it, and the default trees of recycle,
    stand-det and ``auto`` were "not found". They install as ``stand_trees`` now."""
    import subprocess
    import sys

    own = tmp_path / "trees"
    own.mkdir()
    (own / "__init__.py").write_text("")
    (own / "mine.json").write_text("{}")
    code = ("from stand_runtime import bundled_trees; from stand_runtime.trees.tree_io import bundled_families; "
            "print(sorted(bundled_trees()), sorted(bundled_families()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{sorted(BUNDLED)} ['stand-smollm2-humaneval']"


def test_an_install_without_the_bundled_package_finds_the_folder_or_says_to_reinstall(monkeypatch, tmp_path):
    """An install made while the folder was the package ``trees`` (or a source checkout) has no
    ``stand_trees``: the folder beside ``stand_runtime`` serves; without it, one line says to reinstall
    (it said "not found ... (none)")."""
    from stand_runtime.trees import tree_io

    monkeypatch.setattr(tree_io, "BUNDLED_PACKAGE", "stand_trees_not_installed")
    assert sorted(bundled_trees()) == sorted(BUNDLED)
    monkeypatch.setattr(tree_io, "__file__", str(tmp_path / "stand_runtime" / "trees" / "tree_io.py"))
    with pytest.raises(StandError, match="not installed: run pip install -e . again"):
        bundled_trees()


def test_bundled_trees_load():
    """Each bundled tree loads as its file's paths, with the shape it was shipped with."""
    trees = bundled_trees()
    assert set(trees) == set(BUNDLED)
    for name, (per_depth, widths, calibrated) in BUNDLED.items():
        loaded = load_tree(name)
        raw = json.loads(Path(trees[name]).read_text())
        assert sorted(loaded.tree.paths) == sorted(tuple(p) for p in raw["paths"]), name
        assert loaded.tree.num_nodes == 80 and loaded.tree.nodes_per_depth() == per_depth, name
        assert loaded.tree.width_per_depth() == widths, name
        assert loaded.tree.paths[:2] == ((0,), (1,)) and (loaded.expected_acceptance is not None) == calibrated, name
        if calibrated:  # the calibrated acceptance of each node, as stored; a child never above its parent
            alpha = loaded.expected_acceptance
            assert alpha == pytest.approx(tuple(raw["expected_acceptance"][raw["paths"].index(list(p))]
                                                for p in loaded.tree.paths))
            parents = loaded.tree.parents
            assert all(alpha[i - 1] <= alpha[parents[i] - 1] + 1e-12 for i in range(1, 81) if parents[i] > 0)


def test_a_family_where_one_tree_belongs_is_named_a_family():
    """``calibrate --candidate FAMILY`` and every other single-tree input: said to be a family, not a
    schema error about a missing 'paths'."""
    from stand_runtime.trees.tree_io import bundled_families, load_tree

    family = next(iter(bundled_families().values()))
    with pytest.raises(StandError, match=r"a tree family \(one tree per size; treeopt export CALIBRATION --nodes K "
                                         r"writes one of them from the calibration it came from\), not a tree$") as error:
        load_tree(family)
    assert "\n" not in str(error.value)


def test_the_toolkits_other_files_where_a_tree_belongs_are_named():
    """``--tree calibration.json`` or an acceptance seed: said to be what it is, not a schema error."""
    from stand_runtime.trees.tree_io import bundled_files, load_tree

    for suffix, kind in ((".calibration.json", "a calibration (treeopt calibrate's output; treeopt export FILE"),
                         (".acceptance.json", "an acceptance seed (of the value-sized trees, dynamic-auto), not a tree")):
        path = next(iter(bundled_files(suffix).values()))
        with pytest.raises(StandError, match="bad tree JSON .*: " + re.escape(kind)) as error:
            load_tree(path)
        assert "\n" not in str(error.value)
    for unhashable in ([1], {"a": 1}):  # a format that is no name: the schema's error, not a TypeError
        with pytest.raises(StandError, match="bad tree JSON tree: top level"):
            parse_tree({"format": unhashable, "paths": [[0]]})


def test_tree_files_that_python_itself_refuses_are_one_line_errors(tmp_path):
    """An integer past Python's 4,300-digit limit, a name too long for the file system: StandError,
    not a ValueError or OSError from inside json or pathlib."""
    from stand_runtime.trees.tree_io import load_tree, save_tree

    big = tmp_path / "big.json"
    big.write_text("[[0], [" + "9" * 5000 + "]]")
    long = tmp_path / ("a" * 300 + ".json")
    for action, message in [(lambda: load_tree(big), "bad tree JSON .*: not JSON .*5000 digits"),
                            (lambda: load_tree(long), "cannot read tree .*: File name too long$"),
                            (lambda: save_tree(load_tree("heuristic-80"), long), "cannot write .*: File name too long$")]:
        with pytest.raises(StandError, match=message) as error:
            action()
        assert "\n" not in str(error.value)


def test_a_loaded_trees_metadata_is_the_callers_own():
    """Trees are parsed once and cached; each load hands out its own metadata, so editing one
    caller's copy changes no later load."""
    from stand_runtime.trees.tree_io import load_tree

    first = load_tree("heuristic-80")
    first.metadata["note"] = "mine"
    again = load_tree("heuristic-80")
    assert "note" not in again.metadata and again.tree is first.tree


def test_numpy_integer_ranks_are_ranks():
    """Numpy integers are accepted wherever ints are; a tree's paths keep Python ints (saved as JSON)."""
    tree = DraftTree.from_paths([[np.int64(0)], np.array([1]), [0, np.int32(0)]])
    assert tree.paths == DraftTree.from_paths([[0], [1], [0, 0]]).paths
    assert all(type(rank) is int for path in tree.paths for rank in path)
    with pytest.raises(StandError, match="is not a list of integer ranks"):
        DraftTree.from_paths([np.array([0.0])])
