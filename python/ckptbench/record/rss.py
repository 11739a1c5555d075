"""One process's own resident set size, sampled often over a short window (a save's memory
peak on one rank); a process tree's CPU and memory over a whole job are ``resources``'."""

from __future__ import annotations

import dataclasses
import threading

import psutil


@dataclasses.dataclass(frozen=True)
class RSSPeak:
    """One process's resident set size over a window: at its start, and the highest sampled.

    Attributes:
      start_bytes: RSS when the window opened, bytes.
      peak_bytes: highest RSS of any sample (the first and the last included), bytes.
      sample_count: samples taken.
    """

    start_bytes: int
    peak_bytes: int
    sample_count: int


class ProcessRSSSampler:
    """Samples this process's own RSS on a daemon thread between ``start()`` and ``stop()``.

    Why not ResourceSampler: that one walks a process tree (CPU and RSS of every process) every
    250 ms for a whole job; a save's memory peak is one rank process's, and a peak that lasts a
    few tens of milliseconds (a staging buffer, a serialized item) falls between 250 ms samples.
    This reads one process's RSS (``psutil.Process.memory_info``, a read of /proc/self/statm,
    tens of microseconds) every ``interval_s``; a peak shorter than the interval can still be
    missed, so the figure is a lower bound of the true peak.

    Args:
      interval_s: seconds between samples (> 0); default 15 ms.

    Raises:
      ValueError: ``interval_s`` <= 0.
    """

    def __init__(self, interval_s: float = 0.015) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._interval_s = interval_s
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_bytes = 0
        self._peak_bytes = 0
        self._count = 0
        self.peak: RSSPeak | None = None

    @property
    def sample_count(self) -> int:
        """Samples taken so far in the current (or last) window."""
        return self._count

    def _sample(self) -> None:
        rss = self._process.memory_info().rss
        self._peak_bytes = max(self._peak_bytes, rss)
        self._count += 1

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def start(self) -> None:
        """Takes the start sample and starts the thread. Raises RuntimeError if running."""
        if self._thread is not None:
            raise RuntimeError("ProcessRSSSampler already started")
        self._start_bytes = self._peak_bytes = self._process.memory_info().rss
        self._count = 1
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> RSSPeak:
        """Stops the thread, takes a last sample and returns (and stores in ``peak``) the result.

        Raises:
          RuntimeError: not started.
        """
        if self._thread is None:
            raise RuntimeError("ProcessRSSSampler was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        self.peak = RSSPeak(self._start_bytes, self._peak_bytes, self._count)
        return self.peak
