"""resources: exact summaries of synthetic samples, and a live sampler over a real process tree."""

import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from ckptbench.record.resources import (
    ResourceSampler,
    TreeSample,
    merge_usage,
    sample_tree,
    summarize,
    window_cpu_seconds,
)
from ckptbench.record.rss import ProcessRSSSampler
from ckptbench.runner.storage import BenchStorage

A, B, C = (101, 1.0), (102, 1.0), (103, 2.0)


def test_summarize_peaks_and_means_exactly():
    samples = [
        TreeSample(0.0, {A: 10.0, B: 5.0}, {A: 100, B: 50}),
        # 1 s later: A used 1.5 s, B 0.5 s -> 2.0 cores; C appeared having used 0.25 s.
        TreeSample(1.0, {A: 11.5, B: 5.5, C: 0.25}, {A: 300, B: 50, C: 20}),
        # B exited; A used 0.5 s over 2 s -> 0.25 cores (+ C's 0.25 s -> 0.375 cores).
        TreeSample(3.0, {A: 12.0, C: 0.5}, {A: 120, C: 400}),
    ]
    usage = summarize(samples, network_received_bytes=7, network_sent_bytes=3)
    assert usage.duration_s == 3.0
    assert usage.sample_count == 3
    assert usage.cpu_peak_cores == pytest.approx(2.25)  # 1.5 + 0.5 + 0.25 in the first second
    # Total: A 2.0 s, B 0.5 s, C 0.5 s (counted from zero) = 3.0 s over 3 s.
    assert usage.cpu_mean_cores == pytest.approx(1.0)
    assert usage.memory_peak_bytes == 520  # 120 + 400 beats 300 + 50 + 20
    assert usage.memory_peak_bytes_per_process_max == 400
    assert (usage.network_received_bytes, usage.network_sent_bytes) == (7, 3)


def test_summarize_rejects_too_few_or_unordered_samples():
    one = TreeSample(0.0, {A: 1.0}, {A: 1})
    with pytest.raises(ValueError, match="at least two"):
        summarize([one], 0, 0)
    with pytest.raises(ValueError, match="out of order"):
        summarize([one, TreeSample(0.0, {A: 1.0}, {A: 1})], 0, 0)


_CHILD = """
import sys, time
block = bytearray(int(sys.argv[1]))
for i in range(0, len(block), 4096):
    block[i] = 1  # touch every page so it is resident
print("ready", flush=True)
end = time.process_time() + float(sys.argv[2])
while time.process_time() < end:
    pass
sys.stdin.read()  # hold the memory until the parent closes stdin
"""


def _loopback_transfer(nbytes: int) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def drain():
        conn, _ = server.accept()
        with conn:
            while conn.recv(1 << 20):
                pass

    reader = threading.Thread(target=drain)
    reader.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"\0" * nbytes)
    reader.join()
    server.close()


def test_sampler_sees_child_memory_cpu_and_loopback_bytes():
    alloc, busy_cpu_s, net = 200 * 2**20, 1.0, 32 * 2**20
    with ResourceSampler(interval_s=0.05) as sampler:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(alloc), str(busy_cpu_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline().strip() == "ready"
        _loopback_transfer(net)
        child.communicate("", timeout=60)  # returns after the child spent busy_cpu_s of CPU
        assert child.returncode == 0
    usage = sampler.usage
    assert usage.sample_count >= 3
    assert usage.memory_peak_bytes_per_process_max >= alloc
    assert usage.memory_peak_bytes >= alloc
    # The child burned >= 1 CPU second inside the window; only its last interval may be missed.
    assert usage.cpu_mean_cores * usage.duration_s >= 0.5 * busy_cpu_s
    assert usage.cpu_peak_cores > 0.0
    assert usage.network_received_bytes >= net
    assert usage.network_sent_bytes >= net


def test_sampler_must_start_before_stop():
    sampler = ResourceSampler()
    with pytest.raises(RuntimeError, match="not started"):
        sampler.stop()
    with pytest.raises(ValueError, match="interval_s"):
        ResourceSampler(interval_s=0)


def test_process_rss_sampler_sees_memory_held_between_samples():
    sampler = ProcessRSSSampler(interval_s=0.01)
    sampler.start()
    held = np.ones(96 << 20, dtype=np.uint8)  # 96 MiB, every page touched
    seen = sampler.sample_count
    deadline = time.monotonic() + 60
    while sampler.sample_count < seen + 2 and time.monotonic() < deadline:
        time.sleep(0.005)  # hold it until the thread has sampled it twice
    del held
    peak = sampler.stop()
    assert peak is sampler.peak
    assert 0 < peak.start_bytes <= peak.peak_bytes
    assert peak.peak_bytes - peak.start_bytes >= 90 << 20
    assert peak.sample_count >= seen + 2 >= 3  # start, two in the window, the last


def test_process_rss_sampler_checks_its_use():
    with pytest.raises(ValueError, match="interval_s must be > 0, got 0"):
        ProcessRSSSampler(interval_s=0)
    sampler = ProcessRSSSampler()
    with pytest.raises(RuntimeError, match="was not started"):
        sampler.stop()
    sampler.start()
    with pytest.raises(RuntimeError, match="already started"):
        sampler.start()
    quick = sampler.stop()
    assert quick.sample_count >= 2 and quick.peak_bytes >= quick.start_bytes > 0


E = (201, 1.0)  # an endpoint process


def test_window_cpu_splits_client_and_endpoint_inside_the_windows():
    samples = [
        TreeSample(0.0, {A: 0.0, E: 0.0}, {}, frozenset({E})),
        TreeSample(1.0, {A: 1.0, E: 0.5}, {}, frozenset({E})),
        # C appears: taken to have started, at 0 CPU, at the sample before (t = 1).
        TreeSample(2.0, {A: 3.0, E: 1.0, C: 0.5}, {}, frozenset({E})),
        TreeSample(4.0, {A: 3.0, C: 1.5}, {}, frozenset()),  # E gone: no more CPU
    ]
    # [0.5, 1.5]: A 0.5 + 1.0 = 1.5 s, C 0.25 s; E 0.25 + 0.25 = 0.5 s.
    assert window_cpu_seconds(samples, [(0.5, 1.5)]) == pytest.approx((1.75, 0.5))
    # Two windows add; the second one after every sample of E counts none of it.
    assert window_cpu_seconds(samples, [(0.5, 1.5), (3.0, 4.0)]) == pytest.approx((2.25, 0.5))
    assert window_cpu_seconds(samples, []) == (0.0, 0.0)
    with pytest.raises(ValueError, match="ends .* before it starts"):
        window_cpu_seconds(samples, [(2.0, 1.0)])


def test_timed_usage_marks_the_endpoint_subtree_and_merges():
    # The "endpoint" burns 0.6 CPU seconds, says so, then idles until killed.
    busy = (
        "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n"
        "print('done', flush=True)\ntime.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", busy], stdout=subprocess.PIPE, text=True)
    try:
        sampler = ResourceSampler(interval_s=0.05, endpoint_pids=[child.pid])
        sampler.start()
        start = time.time()
        assert child.stdout.readline() == "done\n"
        end = time.time()
        sampler.stop()
    finally:
        child.kill()
        child.wait()
    usage = sampler.timed_usage([(start, end)])
    # 0.6 s, plus at most the interpreter's start-up after the first sample.
    assert 0.5 <= usage.endpoint_cpu_seconds <= 0.9
    assert usage.client_cpu_seconds is not None
    plain = ResourceSampler(interval_s=0.05)
    plain.start()
    plain.stop()
    assert plain.timed_usage([]).endpoint_cpu_seconds is None
    both = merge_usage([usage, dataclasses.replace(usage, client_cpu_seconds=1.0)])
    assert both.client_cpu_seconds == pytest.approx(usage.client_cpu_seconds + 1.0)
    assert merge_usage([usage, plain.usage]).client_cpu_seconds is None


def test_a_root_that_only_launches_is_not_the_client():
    def burn_in_root(root_is_client: bool) -> float:
        sampler = ResourceSampler(interval_s=0.05, root_is_client=root_is_client)
        sampler.start()
        start = time.time()
        end_cpu = time.process_time() + 0.3
        while time.process_time() < end_cpu:
            pass
        end = time.time()
        sampler.stop()
        return sampler.timed_usage([(start, end)]).client_cpu_seconds

    assert burn_in_root(False) <= 0.05  # only its (idle) children, if any, count
    assert burn_in_root(True) >= 0.2


def test_the_embedded_endpoints_processes_are_sampled_as_the_endpoint(tmp_path):
    with BenchStorage(local_dir=str(tmp_path)) as storage:
        pids = storage.endpoint_pids
        sample = sample_tree(os.getpid(), pids)
    assert len(pids) == 2  # our server and nginx's master
    marked = {pid for pid, _ in sample.endpoint}
    assert set(pids) < marked  # nginx's workers too
    assert marked < {pid for pid, _ in sample.cpu_seconds}  # this process is the client's
    assert storage.endpoint_pids == []  # stopped
