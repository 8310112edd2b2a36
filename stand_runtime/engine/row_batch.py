"""A batch's rows drafted in one call and fed in one call (docs/design.md §3.8).

Rows whose drafter says :attr:`Drafter.drafts_in_batch` (STAND on a dynamic tree) draft their trees in
one call (:func:`stand_runtime.store.drafting.best_first_rows`: in C++ over native stores), and rows
whose drafter says :attr:`Drafter.feeds_in_batch` merge their step observations in one call
(:func:`stand_runtime.store.native_store.update_sequences`). Every other row takes the per-row path
(:meth:`DecodeRow.propose`, :meth:`DecodeRow.settle`), which stays the reference: the batched calls
give the same drafts, noise consumed, stores and statistics (``tests/runtime/store/test_native.py``).
"""

from __future__ import annotations

from typing import Sequence

from ..store.drafting import best_first_rows
from ..store.native_store import update_sequences
from ..trees.draft import Draft
from .decode_row import DecodeRow


def defer_feeds(rows: Sequence[DecodeRow]) -> None:
    """Let every row whose drafter feeds a native store leave its step's update to :func:`feed_rows`."""
    for row in rows:
        row.defer_feed = row.drafter is not None and row.drafter.feeds_in_batch


def propose_rows(rows: Sequence[DecodeRow], max_nodes: int | None = None) -> list[Draft]:
    """Every row's draft (:meth:`DecodeRow.propose`), the native dynamic trees drafted in one call
    (rows in order; the same drafts as the per-row calls)."""
    native = [b for b, row in enumerate(rows) if row.wants_draft(max_nodes) and row.drafter.drafts_in_batch]
    if len(native) < 2:
        return [row.propose(max_nodes) for row in rows]
    requests = [rows[b].drafter.batch_request(rows[b].committed, rows[b].remaining - 1) for b in native]
    drafted = dict(zip(native, best_first_rows(requests)))
    return [row.proposed(row.drafter.batch_drafted(drafted[b]), max_nodes) if b in drafted else row.propose(max_nodes)
            for b, row in enumerate(rows)]


def feed_rows(rows: Sequence[DecodeRow]) -> None:
    """Merge the rows' pending step observations (``DecodeRow.pending_feed``) into their stores in
    one call, in row order."""
    pending = [row.pending_feed for row in rows if row.pending_feed is not None]
    for row in rows:
        row.pending_feed = None
    if pending:
        update_sequences(pending)
