"""A rank's save measures (worker.save_probe): writer phases, RSS, freeing memory before a save."""

from __future__ import annotations

import gc
import time
import weakref
from types import SimpleNamespace

import pytest
import torch

from ckptbench.worker import save_probe
from ckptbench.worker.arms import make_writer
from ckptbench.worker.save_probe import SaveProbe, WriterPhases, release_free_memory


class _LateWriter:
    """A writer whose data future completes on another thread, ``delay_s`` after write_data."""

    def __init__(self, delay_s: float, error: Exception | None = None) -> None:
        self.delay_s, self.error, self.completed_at = delay_s, error, None

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        import threading
        import time

        from torch.futures import Future

        future = Future()

        def complete():
            time.sleep(self.delay_s)
            self.completed_at = time.time()
            if self.error is not None:
                future.set_exception(self.error)
            else:
                future.set_result(["written"])

        threading.Thread(target=complete, daemon=True).start()
        return future

    def finish(self, metadata, results):
        return None


def test_writer_phases_time_the_data_phase_until_the_future_is_ready():
    writer = _LateWriter(0.2)
    phases = WriterPhases(writer)
    assert writer.prepare_local_plan("plan") == "plan"
    assert writer.prepare_global_plan(["a", "b"]) == ["a", "b"]
    assert phases.plan_s > 0 and phases.finish_s is None
    future = writer.write_data("plan", None)
    assert future.wait() == ["written"]  # what DCP waits on: the chained future
    assert phases.data_end_unix_s >= writer.completed_at > phases.data_start_unix_s
    writer.finish(None, [])
    assert phases.finish_s is not None and phases.finish_s >= 0
    assert type(writer).write_data is _LateWriter.write_data  # the class is left as it was
    failing = _LateWriter(0.0, OSError("disk gone"))
    WriterPhases(failing)
    with pytest.raises(Exception, match="disk gone"):
        failing.write_data("plan", None).wait()


def test_save_probe_measures_a_real_save_round_trip(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    from ckptbench.workloads.models.state import expected_bytes

    state = {"w": torch.arange(1 << 20, dtype=torch.float32), "step": torch.tensor(7)}
    writer = make_writer("localfs", "bkt", "p", None, folder=str(tmp_path / "save"))
    probe = SaveProbe(writer, expected_bytes(state))
    with pytest.raises(RuntimeError, match="before the probed save ran"):
        probe.result()
    with probe:
        before = time.time()
        dcp.save(state, storage_writer=writer)  # no process group: one rank, the coordinator
        after = time.time()
    measures = probe.result()
    assert measures.state_bytes == (4 << 20) + 8
    assert 0 < measures.rss_start_bytes <= measures.rss_peak_bytes
    assert before <= measures.data_start_unix_s <= measures.data_end_unix_s <= after
    assert measures.data_s <= after - before
    assert measures.finish_s is not None and measures.plan_s >= 0
    loaded = {"w": torch.zeros(1 << 20), "step": torch.tensor(0)}
    dcp.load(loaded, storage_reader=FileSystemReader(str(tmp_path / "save")))
    assert torch.equal(loaded["w"], state["w"]) and int(loaded["step"]) == 7


def test_release_free_memory_collects_cycles_and_trims_the_c_heap(monkeypatch):
    class Node:
        pass

    # Garbage held only by a reference cycle: freed by the collection, not by refcounting.
    gc.disable()  # the collector must not run on its own between the cycle and the call
    try:
        node = Node()
        node.self = node
        alive = weakref.ref(node)
        del node
        calls = []
        libc = SimpleNamespace(malloc_trim=lambda pad: calls.append(pad))
        monkeypatch.setattr(save_probe.ctypes, "CDLL", lambda name: libc)
        assert release_free_memory() is True
        assert alive() is None
    finally:
        gc.enable()
    assert calls == [0]  # malloc_trim(0): every free page, no padding kept
    monkeypatch.setattr(save_probe.ctypes, "CDLL", lambda name: SimpleNamespace())
    assert release_free_memory() is False  # a C library without malloc_trim (not glibc)
