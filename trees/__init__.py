"""Bundled draft trees (JSON files in this folder, found with importlib.resources):
installed as the package ``stand_trees`` (setup.py)."""
