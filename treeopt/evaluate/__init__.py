"""Evaluation: benches (live, trace replay, vLLM), test-time scaling search (best-of-N, DVTS) and its
verifiers, answer extraction, method lists, plots."""
