"""CPU, memory and network use of a process tree (runner + rank processes), sampled with psutil.

A background thread samples, every ``interval_s``, each live process of the tree (the root and
all its descendants): CPU seconds (user + system, every thread) and resident set size.
``summarize`` turns the samples into peaks. Processes in the subtrees of the given endpoint pids
(LocalGCS's nginx and server) are the endpoint's, the rest the client's; ``timed_usage`` splits
the CPU used inside the timed windows (each process's cumulative CPU interpolated linearly
between samples at the windows' ends) into the two. Limits, by design of the method: CPU used by
a process that starts and exits between two samples is missed; RSS summed over processes counts
shared pages (libraries, shared memory) once per process, so it overstates the physical total;
network bytes are host-wide over all interfaces, loopback included (the local GCS endpoint's
traffic is on loopback).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Mapping, Sequence

import psutil

# A process is keyed by (pid, create time) so a reused pid is not mistaken for its predecessor.
ProcessKey = tuple[int, float]


@dataclasses.dataclass(frozen=True)
class TreeSample:
    """One sample of the tree.

    Attributes:
      time_s: ``time.monotonic()`` seconds when the sample was taken.
      cpu_seconds: per process, cumulative user+system CPU seconds.
      rss_bytes: per process, resident set size in bytes.
      endpoint: the keys of the processes that belong to the endpoint (the rest: the client).
    """

    time_s: float
    cpu_seconds: Mapping[ProcessKey, float]
    rss_bytes: Mapping[ProcessKey, int]
    endpoint: frozenset[ProcessKey] = frozenset()


@dataclasses.dataclass(frozen=True)
class ResourceUsage:
    """Resource use over a sampling window.

    Attributes:
      duration_s: seconds from the first to the last sample.
      sample_count: number of samples.
      cpu_peak_cores: highest CPU use between two consecutive samples, in cores (CPU seconds per
        second) summed over the tree.
      cpu_mean_cores: CPU seconds used by the tree in the window divided by ``duration_s``.
      memory_peak_bytes: highest sum of RSS over the tree in one sample.
      memory_peak_bytes_per_process_max: highest RSS of any single process.
      network_received_bytes, network_sent_bytes: host-wide bytes over the window.
      client_cpu_seconds: CPU seconds (user + system, every thread) of the client's processes
        (the tree but the endpoint's) inside the timed windows; None: not split.
      endpoint_cpu_seconds: the same for the endpoint's processes; None: not split, or no
        endpoint process known (a caller-run emulator, real GCS).
    """

    duration_s: float
    sample_count: int
    cpu_peak_cores: float
    cpu_mean_cores: float
    memory_peak_bytes: int
    memory_peak_bytes_per_process_max: int
    network_received_bytes: int
    network_sent_bytes: int
    client_cpu_seconds: float | None = None
    endpoint_cpu_seconds: float | None = None


def _sum_or_none(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(values)


def merge_usage(usages: Sequence[ResourceUsage]) -> ResourceUsage | None:
    """One ResourceUsage for several sampling windows (e.g. one per interleaved round): peaks
    are the highest, means weighted by window length, counts and bytes summed; None for none."""
    if not usages:
        return None
    duration = sum(u.duration_s for u in usages)
    return ResourceUsage(
        duration_s=duration,
        sample_count=sum(u.sample_count for u in usages),
        cpu_peak_cores=max(u.cpu_peak_cores for u in usages),
        cpu_mean_cores=(
            sum(u.cpu_mean_cores * u.duration_s for u in usages) / duration if duration else 0.0
        ),
        memory_peak_bytes=max(u.memory_peak_bytes for u in usages),
        memory_peak_bytes_per_process_max=max(u.memory_peak_bytes_per_process_max for u in usages),
        network_received_bytes=sum(u.network_received_bytes for u in usages),
        network_sent_bytes=sum(u.network_sent_bytes for u in usages),
        client_cpu_seconds=_sum_or_none([u.client_cpu_seconds for u in usages]),
        endpoint_cpu_seconds=_sum_or_none([u.endpoint_cpu_seconds for u in usages]),
    )


def _cpu_at(series: Sequence[tuple[float, float]], moment: float) -> float:
    """A process's cumulative CPU seconds at ``moment``, interpolated in its (time, CPU) series."""
    if moment <= series[0][0]:
        return series[0][1]
    for (t0, c0), (t1, c1) in zip(series, series[1:], strict=False):
        if moment <= t1:
            return c0 + (c1 - c0) * (moment - t0) / (t1 - t0)
    return series[-1][1]


def window_cpu_seconds(
    samples: Sequence[TreeSample], windows: Sequence[tuple[float, float]]
) -> tuple[float, float]:
    """(client, endpoint) CPU seconds used inside ``windows`` ((start, end) ``time.monotonic()``
    seconds), summed over the windows.

    Each process's cumulative CPU is interpolated linearly between the samples around a
    window's ends; a process first seen after the first sample is taken to have started, with
    zero CPU, at the sample before; after its last sample it used no more.

    Raises:
      ValueError: fewer than two samples, or a window that ends before it starts.
    """
    if len(samples) < 2:
        raise ValueError(f"need at least two samples to split CPU use, got {len(samples)}")
    series: dict[ProcessKey, list[tuple[float, float]]] = {}
    endpoint: set[ProcessKey] = set()
    previous_time = None
    for sample in samples:
        endpoint |= sample.endpoint
        for key, cpu in sample.cpu_seconds.items():
            if key not in series:
                series[key] = [] if previous_time is None else [(previous_time, 0.0)]
            series[key].append((sample.time_s, cpu))
        previous_time = sample.time_s
    client_s = endpoint_s = 0.0
    for start, end in windows:
        if end < start:
            raise ValueError(f"window ends ({end}) before it starts ({start})")
        for key, points in series.items():
            used = max(0.0, _cpu_at(points, end) - _cpu_at(points, start))
            if key in endpoint:
                endpoint_s += used
            else:
                client_s += used
    return client_s, endpoint_s


def summarize(
    samples: Sequence[TreeSample],
    network_received_bytes: int,
    network_sent_bytes: int,
) -> ResourceUsage:
    """Computes ResourceUsage from samples in time order.

    A process first seen after the first sample is counted from zero CPU seconds (it started in
    the window). Raises ValueError if there are fewer than two samples or times go backwards.
    """
    if len(samples) < 2:
        raise ValueError(f"need at least two samples to measure resource use, got {len(samples)}")
    peak_cores = 0.0
    for prev, cur in zip(samples, samples[1:], strict=False):
        elapsed = cur.time_s - prev.time_s
        if elapsed <= 0:
            raise ValueError(f"samples out of order: {prev.time_s} then {cur.time_s}")
        used = sum(
            max(0.0, cpu - prev.cpu_seconds.get(key, 0.0)) for key, cpu in cur.cpu_seconds.items()
        )
        peak_cores = max(peak_cores, used / elapsed)

    first_cpu = samples[0].cpu_seconds
    last_cpu: dict[ProcessKey, float] = {}
    for sample in samples:
        last_cpu.update(sample.cpu_seconds)
    total_cpu = sum(max(0.0, cpu - first_cpu.get(key, 0.0)) for key, cpu in last_cpu.items())
    duration = samples[-1].time_s - samples[0].time_s

    return ResourceUsage(
        duration_s=duration,
        sample_count=len(samples),
        cpu_peak_cores=peak_cores,
        cpu_mean_cores=total_cpu / duration,
        memory_peak_bytes=max(sum(s.rss_bytes.values()) for s in samples),
        memory_peak_bytes_per_process_max=max(
            (rss for s in samples for rss in s.rss_bytes.values()), default=0
        ),
        network_received_bytes=network_received_bytes,
        network_sent_bytes=network_sent_bytes,
    )


def _with_children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def sample_tree(root_pid: int, endpoint_pids: Sequence[int] = ()) -> TreeSample:
    """Samples the root process and its descendants now, and the subtrees of ``endpoint_pids``
    (marked as the endpoint's, whether or not they are in the root's tree); processes that
    vanish are skipped.

    Raises psutil.NoSuchProcess if the root itself does not exist.
    """
    procs = {p.pid: p for p in _with_children(psutil.Process(root_pid))}
    endpoint_pids_now: set[int] = set()
    for pid in endpoint_pids:
        try:
            subtree = _with_children(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
        for proc in subtree:
            procs.setdefault(proc.pid, proc)
            endpoint_pids_now.add(proc.pid)
    cpu: dict[ProcessKey, float] = {}
    rss: dict[ProcessKey, int] = {}
    endpoint: set[ProcessKey] = set()
    now = time.monotonic()
    for proc in procs.values():
        try:
            with proc.oneshot():
                key = (proc.pid, proc.create_time())
                times = proc.cpu_times()
                cpu[key] = times.user + times.system
                rss[key] = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if proc.pid in endpoint_pids_now:
            endpoint.add(key)
    return TreeSample(time_s=now, cpu_seconds=cpu, rss_bytes=rss, endpoint=frozenset(endpoint))


class ResourceSampler:
    """Samples a process tree on a background thread between ``start()`` and ``stop()``.

    Use as a context manager; ``usage`` holds the result after exit::

        with ResourceSampler() as sampler:
            run_rounds()
        print(sampler.usage.cpu_peak_cores)

    Args:
      root_pid: root of the tree; defaults to this process.
      interval_s: seconds between samples (> 0).
      endpoint_pids: the endpoint's processes (their subtrees are sampled as the endpoint's);
        empty: the endpoint's CPU is not known (``timed_usage`` leaves it None).
      root_is_client: count the root's own CPU as the client's in ``timed_usage``; False when
        the root only launches and samples (the client's work runs in its children).
    """

    def __init__(
        self,
        root_pid: int | None = None,
        interval_s: float = 0.25,
        endpoint_pids: Sequence[int] = (),
        root_is_client: bool = True,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._root_pid = os.getpid() if root_pid is None else root_pid
        self._endpoint_pids = tuple(endpoint_pids)
        self._root_is_client = root_is_client
        self._unix_minus_monotonic = 0.0
        self._interval_s = interval_s
        self._samples: list[TreeSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._net_start: tuple[int, int] = (0, 0)
        self.usage: ResourceUsage | None = None

    @staticmethod
    def _network_counters() -> tuple[int, int]:
        counters = psutil.net_io_counters()
        return counters.bytes_recv, counters.bytes_sent

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._samples.append(sample_tree(self._root_pid, self._endpoint_pids))
            except psutil.NoSuchProcess:
                return

    def start(self) -> None:
        """Takes the first sample and starts the sampling thread. Raises RuntimeError if running."""
        if self._thread is not None:
            raise RuntimeError("ResourceSampler already started")
        self._unix_minus_monotonic = time.time() - time.monotonic()
        self._samples = [sample_tree(self._root_pid, self._endpoint_pids)]
        self._net_start = self._network_counters()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> ResourceUsage:
        """Stops sampling, takes a last sample and returns (and stores in ``usage``) the result."""
        if self._thread is None:
            raise RuntimeError("ResourceSampler was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        recv_end, sent_end = self._network_counters()
        try:
            self._samples.append(sample_tree(self._root_pid, self._endpoint_pids))
        except psutil.NoSuchProcess:
            pass
        if len(self._samples) < 2:
            # The root exited right away: repeat the lone sample so the window is well defined.
            only = self._samples[0]
            later = max(time.monotonic(), only.time_s + 1e-6)
            self._samples.append(dataclasses.replace(only, time_s=later))
        self.usage = summarize(
            self._samples,
            network_received_bytes=recv_end - self._net_start[0],
            network_sent_bytes=sent_end - self._net_start[1],
        )
        return self.usage

    def timed_usage(self, windows: Sequence[tuple[float, float]]) -> ResourceUsage:
        """``usage`` with the CPU inside ``windows`` ((start, end) ``time.time()`` seconds, e.g.
        each timed round's first rank start to last rank end) split into client and endpoint
        seconds (:func:`window_cpu_seconds`; the root left out unless ``root_is_client``); the
        endpoint's None without endpoint pids.

        Raises:
          RuntimeError: called before ``stop()``.
        """
        if self.usage is None:
            raise RuntimeError("ResourceSampler.timed_usage needs stop() first")
        offset = self._unix_minus_monotonic
        samples = self._samples
        if not self._root_is_client:
            samples = [
                dataclasses.replace(
                    s,
                    cpu_seconds={k: v for k, v in s.cpu_seconds.items() if k[0] != self._root_pid},
                )
                for s in samples
            ]
        client_s, endpoint_s = window_cpu_seconds(
            samples, [(start - offset, end - offset) for start, end in windows]
        )
        return dataclasses.replace(
            self.usage,
            client_cpu_seconds=client_s,
            endpoint_cpu_seconds=endpoint_s if self._endpoint_pids else None,
        )

    def __enter__(self) -> ResourceSampler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
