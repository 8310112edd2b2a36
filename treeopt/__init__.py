"""treeopt: offline draft-tree optimization for STAND (candidate tree, calibration, pruning, export)."""

from stand_runtime import __version__

__all__ = ["__version__"]
