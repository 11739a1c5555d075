"""Background priority of an async save's threads (gcsckpt.dcp.save.background) and its option."""

from __future__ import annotations

import os
import threading

import pytest

from gcsckpt.dcp import GCSStorageWriter
from gcsckpt.dcp.save.background import lower_thread_priority


def _in_thread(fn):
    out = {}

    def run():
        out["result"] = fn()
        out["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out


def test_a_worker_thread_is_lowered_once_and_the_main_thread_never():
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert lower_thread_priority(19) is False  # the main thread (training) is left alone
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    if before >= 18:
        pytest.skip(f"this process already runs at nice {before}")
    assert _in_thread(lambda: lower_thread_priority(18)) == {"result": True, "nice": 18}
    twice = _in_thread(lambda: (lower_thread_priority(18), lower_thread_priority(18)))
    assert twice == {"result": (True, False), "nice": 18}


@pytest.mark.parametrize("nice", [0, 20, -1])
def test_writer_refuses_a_nice_value_out_of_range(nice):
    with pytest.raises(ValueError, match="background_nice must be None or 1-19"):
        GCSStorageWriter("gs://bkt/p", background_nice=nice)
