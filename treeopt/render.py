"""Rich tables for decoding statistics, tree profiles and benchmark results (used by the CLI)."""

from __future__ import annotations

from rich.table import Table

from stand_runtime.metrics import DecodeStats


def stats_table(stats: DecodeStats, title: str = "decoding") -> Table:
    """One decoding run: tokens, steps, acceptance length, throughput and the time split."""
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    drafted = stats.drafted_per_step
    rows = [
        ("prompt tokens", f"{stats.prompt_tokens}"),
        ("new tokens", f"{stats.new_tokens}"),
        ("target forwards (steps)", f"{stats.target_forwards}"),
        ("acceptance length (tokens/step)", f"{stats.acceptance_length:.2f}"),
        ("drafted nodes per step", f"{sum(drafted) / len(drafted):.1f}" if drafted else "0"),
        ("throughput (tokens/s, prefill excluded)", f"{stats.tokens_per_s:.1f}"),
        ("prefill (s)", f"{stats.prefill_s:.2f}"),
        ("drafting (s)", f"{stats.drafting_s:.2f}"),
        ("tree forwards (s)", f"{stats.forward_s:.2f}"),
        ("verification (s)", f"{stats.verification_s:.2f}"),
        ("bookkeeping (s)", f"{stats.bookkeeping_s:.2f}"),
    ]
    if stats.store:
        rows.append(("store entries / hit rate", f"{stats.store['entries']} / {stats.store['hit_rate']:.2f}"))
    for name, value in rows:
        table.add_row(name, value)
    return table
