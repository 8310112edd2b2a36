"""Every row's verification walk of one step, advanced level by level (ours; docs/algorithms.md §4.7).

A walk (:data:`stand_runtime.verify.Walk`) visits one draft position per level, root first, and reads
p (or the argmax) there. Walking the rows one after another computes one target row per call; on a
CPU such a call costs about what one over the whole batch does (:meth:`.row.StepTarget.compute`), so
here every row's walk takes one level at a time and the positions a level visits are computed
together. Each walk draws from its own row's stream in its own order, so the verifications are
those of the walks run one by one (tests/lossless/test_walks.py).
"""

from __future__ import annotations

from typing import Sequence

from ..verify import Verification, Walk, checked_row
from .row import StepTarget


def walk_rows(walks: Sequence[Walk], targets: Sequence[StepTarget]) -> list[Verification]:
    """Each row's :class:`stand_runtime.verify.Verification`: its walk (:meth:`.row.DecodeRow.walk`:
    greedy, drafter-invariant or recursive rejection) run to its end, equal to running it alone.

    Args:
        walks: one fresh walk per row, of the draft forwarded.
        targets: the forward's output, one :class:`StepTarget` per row (its ``params`` say whether the
            walk reads the argmax or p).

    Raises:
        StandError: p (or the logits) not finite at a visited position.
    """
    results: list[Verification | None] = [None] * len(walks)
    pending = {b: next(walk) for b, walk in enumerate(walks)}  # row -> the position its walk reads next
    while pending:
        StepTarget.compute([(targets[b], position) for b, position in pending.items()])
        advanced = {}
        for b, position in pending.items():
            target = targets[b]
            read = (target.argmax_at(position) if target.params.greedy
                    else checked_row(target.target_at(position), position))
            try:
                advanced[b] = walks[b].send(read)
            except StopIteration as done:
                results[b] = done.value
        pending = advanced
    return results
