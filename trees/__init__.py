"""Bundled draft trees (JSON files in this folder, found with importlib.resources)."""
