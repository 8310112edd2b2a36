"""A batch's native rows drafted in one call and fed in one call (docs/design.md §3.8).

Rows whose drafter is a :class:`stand_runtime.drafters.stand.StandDrafter` on a dynamic tree over a
native store (``StandDrafter.native``) draft their trees in one call into C++
(:func:`stand_runtime.drafters.native_draft.native_best_first_rows`), and rows whose drafter feeds a
native store (``StandDrafter.native_feed``) merge their step observations in one call
(:func:`stand_runtime.store.native_store.update_sequences`). Every other row takes the per-row path
(:meth:`DecodeRow.propose`, :meth:`DecodeRow.settle`), which stays the reference: the batched calls
give the same drafts, noise consumed, stores and statistics (``tests/test_native.py``).
"""

from __future__ import annotations

from typing import Sequence

from ..drafters.native_draft import native_best_first_rows
from ..store.native_store import update_sequences
from ..trees.draft import Draft
from .decode_row import DecodeRow


def native_rows(drafter) -> bool:
    """True when ``drafter`` drafts a native dynamic tree (batched by :func:`propose_rows`)."""
    return bool(getattr(drafter, "native", False))


def defer_feeds(rows: Sequence[DecodeRow]) -> None:
    """Let every row whose drafter feeds a native store leave its step's update to :func:`feed_rows`."""
    for row in rows:
        row.defer_feed = bool(getattr(row.drafter, "native_feed", False))


def propose_rows(rows: Sequence[DecodeRow], max_nodes: int | None = None) -> list[Draft]:
    """Every row's draft (:meth:`DecodeRow.propose`), the native dynamic trees drafted in one call
    (rows in order; the same drafts as the per-row calls)."""
    native = [b for b, row in enumerate(rows) if row.wants_draft(max_nodes) and native_rows(row.drafter)]
    if len(native) < 2:
        return [row.propose(max_nodes) for row in rows]
    requests = [rows[b].drafter.request(rows[b].committed, rows[b].remaining - 1) for b in native]
    drafted = dict(zip(native, native_best_first_rows(requests)))
    return [row.proposed(row.drafter.sized(drafted[b]), max_nodes) if b in drafted else row.propose(max_nodes)
            for b, row in enumerate(rows)]


def feed_rows(rows: Sequence[DecodeRow]) -> None:
    """Merge the rows' pending step observations (``DecodeRow.pending_feed``) into their stores in
    one call, in row order."""
    pending = [row.pending_feed for row in rows if row.pending_feed is not None]
    for row in rows:
        row.pending_feed = None
    if pending:
        update_sequences(pending)
