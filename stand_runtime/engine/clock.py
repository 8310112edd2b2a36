"""The engine's clock: wall-clock laps into the :class:`stand_runtime.engine.metrics.DecodeStats` of
the rows a lap served (seconds), device-aware.

On a CPU each lap adds ``perf_counter`` time at once. On CUDA a lap records an event instead of
synchronising (a sync per lap would stall the pipeline); :meth:`Clock.settle` synchronises once and
adds the times between consecutive events. A lap counts fully for every row it served: in a batch a
row's times are the wall time of the batch steps it took part in.
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from .metrics import DecodeStats


class Clock:
    """Laps into the statistics of the rows being served (:attr:`rows`, set by the engine).

    Args:
        device: the model's device (``cuda`` → event timing).

    Attributes:
        cuda: laps are CUDA events (their times are known at :meth:`settle`).
    """

    def __init__(self, device) -> None:
        self.rows: Sequence[DecodeStats] = ()
        self.cuda = torch.device(device).type == "cuda"
        self._last = time.perf_counter()
        self._events: list[tuple[object, str | None, tuple[DecodeStats, ...]]] = []
        if self.cuda:
            self.lap(None)

    def lap(self, bucket: str | None) -> float | None:
        """Close the current lap into ``<bucket>`` of every served row's stats (None: discard it).

        Returns:
            The lap's seconds on a CPU; None on CUDA (known only at :meth:`settle`).
        """
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append((event, bucket, tuple(self.rows)))
            return None
        now = time.perf_counter()
        seconds, self._last = now - self._last, now
        if bucket is not None:
            for stats in self.rows:
                setattr(stats, bucket, getattr(stats, bucket) + seconds)
        return seconds

    def settle(self) -> None:
        """Add the recorded CUDA laps to the statistics (one synchronisation); a no-op on a CPU."""
        if len(self._events) < 2:
            return
        torch.cuda.synchronize()
        for (start, _, _), (end, bucket, rows) in zip(self._events, self._events[1:]):
            if bucket is not None:
                seconds = start.elapsed_time(end) / 1e3
                for stats in rows:
                    setattr(stats, bucket, getattr(stats, bucket) + seconds)
        self._events = self._events[-1:]
