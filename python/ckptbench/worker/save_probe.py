"""What one rank measures around its timed ``dcp.save``: its own peak RSS and the writer's phases.

The benchmark compares writers it does not own (msc, dataflux, torch's own), so nothing here
changes a writer: ``WriterPhases`` wraps four methods of one writer *instance* from the outside
(instance attributes shadow the class's methods; the class and every other instance are left
as they are) and times them as DCP calls them: planning (``prepare_local_plan`` on every rank,
``prepare_global_plan`` on the coordinator), the data phase (``write_data`` until its future's
value is ready: the future handed back to DCP is chained behind the writer's, so DCP's wait
ends only after the stamp was taken) and the coordinator's ``finish`` (``.metadata``, the
commit). Why: much of a save is DCP's own planning, pickling and collectives, whatever the
storage, so the whole-save throughput is bounded by that while the data phase is what a
writer's storage path achieves (docs/measurements.md, "Why the main job's saves tie with the
peers").
"""

from __future__ import annotations

import ctypes
import functools
import gc
import time
from typing import Any

from torch.futures import Future

from ckptbench.record.rank_rounds import RankSave
from ckptbench.record.rss import ProcessRSSSampler

RSS_SAMPLE_INTERVAL_S = 0.015  # one process's RSS every 15 ms (see ProcessRSSSampler)


def release_free_memory() -> bool:
    """Collects garbage and hands the C heap's free pages back to the OS (glibc
    ``malloc_trim(0)``), so a rank's RSS right before its save is memory in use.

    Why: building a round's state (materializing the model, the optimizer state, checksums)
    leaves freed heap pages resident (docs/measurements.md, "The start RSS of a save"). Without
    it the start figure carries that freed memory, and a writer's own allocations can reuse those
    pages without raising RSS, hiding from the peak-minus-start figure. Every arm gets the same.

    Returns:
      True when ``malloc_trim`` was called; False where the C library has none (not glibc).
    """
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


class WriterPhases:
    """Times the phases of ``dcp.save`` one StorageWriter instance sees (wraps it in place).

    Args:
      writer: a fresh StorageWriter for one save; its ``prepare_local_plan``,
        ``prepare_global_plan``, ``write_data`` and ``finish`` are wrapped on the instance.

    Attributes (after the save):
      plan_s: seconds in ``prepare_local_plan`` + ``prepare_global_plan``.
      data_start_unix_s / data_end_unix_s: ``time.time()`` at the ``write_data`` call / when its
        future's value was ready (None until then).
      finish_s: seconds in ``finish`` (None where it was not called: ranks other than the
        coordinator).
    """

    def __init__(self, writer: Any) -> None:
        self.plan_s = 0.0
        self.data_start_unix_s: float | None = None
        self.data_end_unix_s: float | None = None
        self.finish_s: float | None = None
        for name in ("prepare_local_plan", "prepare_global_plan"):
            setattr(writer, name, self._timed_plan(getattr(writer, name)))
        writer.write_data = self._timed_write(writer.write_data)
        writer.finish = self._timed_finish(writer.finish)

    def _timed_plan(self, method):
        return _timed(method, lambda seconds: setattr(self, "plan_s", self.plan_s + seconds))

    def _timed_write(self, method):
        @functools.wraps(method)
        def timed(*args, **kwargs) -> Future:
            self.data_start_unix_s = time.time()
            future = method(*args, **kwargs)

            def ready(done: Future):
                self.data_end_unix_s = time.time()
                return done.value()  # re-raises the writer's error into the chained future

            return future.then(ready)

        return timed

    def _timed_finish(self, method):
        return _timed(method, lambda seconds: setattr(self, "finish_s", seconds))


def _timed(method, record):
    """``method`` wrapped so that ``record(seconds)`` gets each call's duration (also when it
    raises)."""

    @functools.wraps(method)
    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            record(time.perf_counter() - began)

    return timed


class SaveProbe:
    """Both measures of one rank's timed save: wrap the writer, then ``with probe:`` around
    ``dcp.save`` (the RSS thread starts right before and stops right after); ``result()``.

    Args:
      writer: the round's fresh StorageWriter (wrapped by WriterPhases).
      state_bytes: tensor bytes of the state being saved (``models.state.expected_bytes``).
      interval_s: RSS sampling interval, seconds.
    """

    def __init__(
        self, writer: Any, state_bytes: int, interval_s: float = RSS_SAMPLE_INTERVAL_S
    ) -> None:
        self.phases = WriterPhases(writer)
        self.state_bytes = state_bytes
        self._rss = ProcessRSSSampler(interval_s)

    def __enter__(self) -> SaveProbe:
        self._rss.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._rss.stop()

    def result(self) -> RankSave:
        """The rank's RankSave for the finished save.

        Raises:
          RuntimeError: the probe was not run, or DCP never waited for ``write_data``'s value
            (the save did not complete).
        """
        peak = self._rss.peak
        phases = self.phases
        if peak is None:
            raise RuntimeError("SaveProbe.result() before the probed save ran")
        if phases.data_start_unix_s is None or phases.data_end_unix_s is None:
            raise RuntimeError("the probed save never completed write_data")
        return RankSave(
            state_bytes=self.state_bytes,
            rss_start_bytes=peak.start_bytes,
            rss_peak_bytes=peak.peak_bytes,
            rss_sample_count=peak.sample_count,
            plan_s=phases.plan_s,
            data_start_unix_s=phases.data_start_unix_s,
            data_end_unix_s=phases.data_end_unix_s,
            finish_s=phases.finish_s,
        )
