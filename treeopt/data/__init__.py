"""Inputs: prompt datasets and recorded reasoning traces."""
