"""The ``format`` names of the toolkit's JSON files, in one place, so that a loader given another of
the toolkit's files says which it is (``X is a calibration, not a tree``) rather than failing on a
missing field. Each file's loader keeps its own version and schema."""

TREE_FORMAT = "stand-tree"
"""One draft tree (:mod:`stand_runtime.trees.tree_io`)."""

FAMILY_FORMAT = "stand-tree-family"
"""A family of trees, one per size (the same module)."""

ACCEPTANCE_FORMAT = "stand-acceptance"
"""An acceptance seed of the value-sized trees (:mod:`stand_runtime.sizing.acceptance_seed`)."""

CALIBRATION_FORMAT = "stand-calibration"
"""A calibration of a candidate tree (``treeopt calibrate``'s output, :mod:`treeopt.optimize.calibration`)."""

FILE_KINDS = {
    TREE_FORMAT: "a tree file",
    FAMILY_FORMAT: "a tree family (one tree per size; treeopt export CALIBRATION --nodes K writes one of them "
                   "from the calibration it came from)",
    ACCEPTANCE_FORMAT: "an acceptance seed (of the value-sized trees, dynamic-auto)",
    CALIBRATION_FORMAT: "a calibration (treeopt calibrate's output; treeopt export FILE --out TREE writes its tree)",
}
"""What each format is, as errors name it."""


def file_kind(data) -> str | None:
    """The format of decoded JSON ``data`` where it is one of :data:`FILE_KINDS` (a bare list of paths is
    a tree file), else None (an unknown, missing or unhashable ``format`` value)."""
    if isinstance(data, list):
        return TREE_FORMAT
    kind = data.get("format") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) and kind in FILE_KINDS else None
