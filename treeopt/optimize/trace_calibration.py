"""Calibrating a tree from recorded traces, with no model (docs/trees.md §6.4).

A recorded trace is the target's output under greedy decoding: p is one-hot on the trace's next
token at every position. Greedy replay calibration (:func:`treeopt.optimize.replay.replay_trajectory` with
deterministic drafts) then walks the candidate tree at each step the engine would take along the
trace: a node is accepted exactly when the store's top-m put the trace's next token there on the
accepted path. The store is fed what a recording knows, the observed next token (one-hot rows),
so the tree is calibrated for how STAND drafts on such text; a domain's logs become its tree.

The traces of one group share one store, in file order (best-of-N trajectories of one problem), as
in :func:`treeopt.optimize.calibrate.calibrate`.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Callable

import numpy as np

from stand_runtime import DraftTree, NGramStore, RecordedDistributions, StandError, __version__
from stand_runtime.randomness import RandomStream

from .calibration import Calibration
from .replay import replay_trajectory
from ..data.traces import TraceGroup


def trace_recording(prompt: list[int], trace: list[int], store_rows: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> RecordedDistributions:
    """The greedy recording of ``prompt + trace`` (token ids, the prompt non-empty): p one-hot on each next
    token; ``store_rows``: ``([P - 1 + G, k] ids, [P - 1 + G, k] probs)`` the store records instead of the
    one-hot next tokens (e.g. a model's softmax top-10)."""
    sequence = list(prompt) + list(trace)
    following = np.asarray(sequence[1:], dtype=np.int64)
    if store_rows is None:
        store_ids, store_probs = following.reshape(-1, 1), np.ones((len(following), 1))
    else:
        store_ids, store_probs = store_rows
    targets = following[len(prompt) - 1:]
    return RecordedDistributions(store_ids, store_probs, [np.array([t]) for t in targets.tolist()],
                                 [np.ones(1) for _ in range(len(targets))])


def calibrate_traces(groups: list[TraceGroup], candidate: DraftTree, *,
                     on_group: Callable[[Calibration, TraceGroup], None] | None = None,
                     on_tokens: Callable[[int], None] | None = None) -> Calibration:
    """Greedy replay calibration of ``candidate`` on tokenized trace groups
    (:func:`treeopt.data.traces.tokenize_groups`): one entry per group, alpha-hat = accepted per step.
    ``on_group(calibration so far, group)`` after each group, ``on_tokens(count)`` after each trace.

    Raises:
        StandError: no groups, or a group that was not tokenized.
    """
    if not groups:
        raise StandError("no trace groups to calibrate on")
    calibration = Calibration(candidate, np.zeros(candidate.num_nodes + 1))
    randomness = RandomStream.seeded(0)  # greedy: step ends are 0/1, no draw matters
    start = time.perf_counter()
    for group in groups:
        if not group.prompt_ids or not group.trace_ids:
            raise StandError(f"trace group {group.name!r} is not tokenized")
        store = NGramStore()
        alpha_sum = np.zeros(candidate.num_nodes + 1)
        steps = tokens = 0
        for trace in group.trace_ids:
            recorded = trace_recording(group.prompt_ids, trace)
            steps += replay_trajectory(group.prompt_ids, trace, recorded, candidate, store, randomness, alpha_sum,
                                       stochastic=False, budget=len(trace), segmentations=1)
            tokens += len(trace)
            if on_tokens is not None:
                on_tokens(len(trace))
        calibration.add_prompt(group.name, alpha_sum, steps, tokens)
        if on_group is not None:
            on_group(calibration, group)
    calibration.metadata = {"source": "traces", "groups": len(calibration.per_prompt), "temperature": 0.0,
                            "replay_s": time.perf_counter() - start, "version": __version__,
                            "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return calibration
