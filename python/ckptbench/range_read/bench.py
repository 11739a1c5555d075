"""Range-read benchmark: gcsckpt's RangeReader against gcsfs, google-cloud-storage and a raw
parallel-GET ceiling, on a plain and a latency-modelled local GCS endpoint.

Method: one object (default 256 MiB) of seeded random bytes; per range size a sorted set of
distinct aligned ranges; every client reads the same set into (or returns) fresh bytes, after
one untimed warm-up GET; each timed round is checked byte for byte afterwards. MB/s counts
useful bytes (1 MB = 1e6 bytes) over wall time of the median round; CPU is this process's
user+system time (all threads; the endpoint's nginx is not counted). Within a range-size group
the clients take turns round by round, so load from other processes hits all alike. Every group
also times the raw parallel-GET ceiling in the same rounds: the whole object as 8 MiB ranged GETs
from a keep-alive Python thread pool, all 32 at once: what the endpoint serves at best.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from ckptbench.range_read import range_rows
from ckptbench.range_read.clients import (
    CeilingClient,
    GcsChunksClient,
    GcsfsClient,
    RawPoolClient,
    ReaderClient,
)
from ckptbench.range_read.ranges import RangeSet, make_range_set, size_label
from ckptbench.record.host import host_facts

MiB = 1 << 20
BUCKET = "range-read-bench"
OBJECT = "bench/object.bin"
CLIENTS = ("gcsckpt", "gcsfs", "gcs_chunks", "raw")


@dataclasses.dataclass
class Settings:
    """What to measure. Sizes in bytes, latency in ms, rates in MB/s (1e6 bytes)."""

    object_bytes: int = 256 * MiB
    range_sizes: tuple[int, ...] = (4 << 10, 1 * MiB, 64 * MiB)
    concurrency: tuple[int, ...] = (1, 4, 16, 32, 64)
    endpoints: tuple[str, ...] = ("plain", "modelled")
    latency_ms: float = 30.0
    stream_mbps: float = 200.0
    clients: tuple[str, ...] = CLIENTS
    rounds: int = 1
    byte_budget: int = 64 * MiB  # useful bytes per range set at most
    max_ranges_plain: int = 2048
    max_ranges_modelled: int = 256  # per-request latency makes long sets slow at concurrency 1
    raw_concurrency: int = 16
    ceiling_chunk: int = 8 * MiB
    ceiling_concurrency: int = 32  # 256 MiB / 8 MiB: every GET of the ceiling at once
    data_dir: str | None = None
    tune: bool = False
    seed: int = 1

    def __post_init__(self) -> None:
        unknown = set(self.clients) - set(CLIENTS)
        if unknown:
            raise ValueError(f"unknown clients {sorted(unknown)}; known: {CLIENTS}")
        bad = set(self.endpoints) - {"plain", "modelled"}
        if bad:
            raise ValueError(f"unknown endpoints {sorted(bad)}; known: plain, modelled")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")


def log(message: str) -> None:
    print(f"[range_read {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def source_bytes(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def ensure_object(gcs, source: np.ndarray) -> None:
    """Uploads the object unless the data folder already holds exactly these bytes."""
    path = os.path.join(gcs.data_dir, ".cloudstorage", BUCKET, OBJECT)
    if os.path.exists(path) and os.path.getsize(path) == source.size:
        if np.array_equal(np.fromfile(path, dtype=np.uint8), source):
            return
    gcs.create_bucket(BUCKET)  # an existing bucket (reused data folder) is fine
    gcs.put(BUCKET, OBJECT, source.tobytes())


def measure(
    endpoint: str,
    clients: list,
    range_set: RangeSet,
    dests: list[np.ndarray],
    source: np.ndarray,
    rounds: int,
    params: list[dict] | None = None,
    group: str | None = None,
) -> list[range_rows.Row]:
    """One warm-up GET per client, then `rounds` rounds in which every client reads
    `range_set` in turn (interleaved, so load from other processes hits all alike). Every
    round's bytes are checked against `source`."""
    # A client may bring its own range set and buffers (the ceiling reads the whole object).
    sets = [getattr(c, "range_set", range_set) for c in clients]
    bufs = [getattr(c, "dests", dests) for c in clients]
    for client, rs, ds in zip(clients, sets, bufs, strict=True):
        client.run(RangeSet(rs.range_bytes, rs.offsets[:1]), ds[:1])
    runs = [{"seconds": [], "cpu": [], "requests": [], "received": [], "ok": True} for _ in clients]
    for _ in range(rounds):
        for client, run, rs, ds in zip(clients, runs, sets, bufs, strict=True):
            for d in ds:
                d.fill(0)  # a client that skips a range must not pass on older bytes
            wall0, cpu0 = time.perf_counter(), time.process_time()
            counts = client.run(rs, ds)
            run["seconds"].append(time.perf_counter() - wall0)
            run["cpu"].append(time.process_time() - cpu0)
            run["requests"].append(counts.requests)
            run["received"].append(counts.bytes_received)
            run["ok"] = run["ok"] and client.check(rs, ds, source)
    rows = []
    for i, (client, run, rs) in enumerate(zip(clients, runs, sets, strict=True)):
        row = range_rows.Row(
            endpoint=endpoint,
            group=group or range_set.label,
            range_size=rs.label,
            range_bytes=rs.range_bytes,
            ranges=len(rs.offsets),
            client=client.name,
            concurrency=client.concurrency,
            useful_bytes=rs.useful_bytes,
            seconds=run["seconds"],
            cpu_seconds=run["cpu"],
            requests=run["requests"],
            bytes_received=run["received"],
            verified=run["ok"],
            params=params[i] if params else {},
        )
        log(
            f"{endpoint:8s} {len(rs.offsets):5d} x {rs.label:6s} "
            f"{client.name:22s} conc={client.concurrency} {row.params or ''} "
            f"{row.mb_per_s:8.0f} MB/s verified={row.verified}"
        )
        rows.append(row)
    return rows


def measure_all(
    endpoint, factories, range_set, dests, source, rounds, params=None, group=None
) -> list[range_rows.Row]:
    """Builds the clients that fit `range_set`, measures them interleaved, closes them."""
    clients, kept_params = [], []
    try:
        for i, factory in enumerate(factories):
            client = factory()
            if client.fits(range_set):
                clients.append(client)
                kept_params.append(params[i] if params else {})
            else:
                client.close()
        return measure(endpoint, clients, range_set, dests, source, rounds, kept_params, group)
    finally:
        for client in clients:
            client.close()


def make_dests(range_set: RangeSet) -> list[np.ndarray]:
    dests = [np.empty(range_set.range_bytes, np.uint8) for _ in range_set.offsets]
    for d in dests:
        d.fill(0)  # fault the pages in before timing
    return dests


def client_factories(s: Settings, endpoint: str) -> list[Callable[[], object]]:
    """Constructors of every client configuration to run against `endpoint`, in table order."""
    out: list[Callable[[], object]] = []
    if "gcsckpt" in s.clients:
        for c in s.concurrency:
            out.append(lambda c=c: ReaderClient(endpoint, BUCKET, OBJECT, c))
    if "gcsfs" in s.clients:
        out.append(lambda: GcsfsClient(endpoint, BUCKET, OBJECT))
    if "gcs_chunks" in s.clients:
        out.append(lambda: GcsChunksClient(endpoint, BUCKET, OBJECT, s.raw_concurrency))
    if "raw" in s.clients:
        label = "raw pool (same ranges)"
        out.append(lambda: RawPoolClient(endpoint, BUCKET, OBJECT, s.raw_concurrency, label))
    return out


def run_endpoint(s: Settings, name: str, endpoint: str, source) -> list[range_rows.Row]:
    """Every range-size group on one endpoint, each with the ceiling timed in the same rounds."""
    rows = []
    max_ranges = s.max_ranges_plain if name == "plain" else s.max_ranges_modelled
    for size in s.range_sizes:
        range_set = make_range_set(s.object_bytes, size, s.byte_budget, max_ranges, s.seed)
        factories = [ceiling_factory(s, endpoint), *client_factories(s, endpoint)]
        rows += measure_all(name, factories, range_set, make_dests(range_set), source, s.rounds)
    return rows


def ceiling_factory(s: Settings, endpoint: str) -> Callable[[], object]:
    whole = make_range_set(s.object_bytes, s.ceiling_chunk, s.object_bytes, 1 << 30)
    return lambda: CeilingClient(endpoint, BUCKET, OBJECT, whole, s.ceiling_concurrency)


def run_tuning(s: Settings, name: str, endpoint: str, source) -> list[range_rows.Row]:
    """Sweeps the reader's tuning options (the sweeps behind the defaults of gcsckpt.io.defaults;
    figures: docs/measurements.md, "Tuning constants"). Each sweep is one interleaved group with
    the ceiling."""

    def reader(conc: int, **options):
        return lambda: ReaderClient(endpoint, BUCKET, OBJECT, conc, **options)

    def sweep(label, range_set, factories, params) -> list[range_rows.Row]:
        factories = [ceiling_factory(s, endpoint), *factories]
        params = [{}, *params]
        dests = make_dests(range_set)
        return measure_all(name, factories, range_set, dests, source, s.rounds, params, label)

    rows = []
    whole = make_range_set(s.object_bytes, s.object_bytes, s.object_bytes, 1)
    for threads in (1, 2, 4):
        factories, params = [], []
        for conc in (8, 16, 32, 64):
            for chunk in (2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB, 64 * MiB):
                factories.append(reader(conc, num_threads=threads, chunk_bytes=chunk))
                params.append({"threads": threads, "chunk": size_label(chunk)})
        rows += sweep(f"whole/threads={threads}", whole, factories, params)
    eights = make_range_set(s.object_bytes, 8 * MiB, 64 * MiB, 8, s.seed)
    floors = (1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB)
    factories = [reader(64, min_chunk_bytes=f) for f in floors]
    params = [{"min_chunk": size_label(f)} for f in floors]
    rows += sweep("8MiB/min_chunk", eights, factories, params)
    budgets = (64 * MiB, 256 * MiB, 1024 * MiB)
    factories = [reader(64, max_inflight_bytes=b) for b in budgets]
    params = [{"inflight_bytes": size_label(b)} for b in budgets]
    rows += sweep("whole/inflight_bytes", whole, factories, params)
    max_ranges = s.max_ranges_plain if name == "plain" else s.max_ranges_modelled
    gaps = (0, 16 << 10, 64 << 10, 256 << 10, 1 * MiB)
    for size in (4 << 10, 64 << 10):
        scattered = make_range_set(s.object_bytes, size, s.byte_budget, max_ranges, s.seed)
        factories, params = [], []
        for conc in (32, 64):
            factories += [reader(conc, coalesce_gap_bytes=g) for g in gaps]
            params += [{"gap": size_label(g) if g else "0"} for g in gaps]
        rows += sweep(f"{size_label(size)}/gap", scattered, factories, params)
    return rows


def run(s: Settings, output: str) -> dict:
    """Runs every configured measurement, prints the table(s), writes JSON to `output`.

    Returns the JSON document as a dict. Raises RuntimeError if any read returned wrong bytes.
    """
    from gcsckpt.testing import LocalGCS

    started = time.perf_counter()
    source = source_bytes(s.object_bytes, s.seed)
    data_dir = s.data_dir or tempfile.mkdtemp(prefix="range-read-data-")
    rows, tuning = [], []
    host = host_facts()
    with LocalGCS(data_dir=data_dir) as plain:
        ensure_object(plain, source)
        log(f"object gs://{BUCKET}/{OBJECT}: {s.object_bytes} bytes in {data_dir}")
        for name in s.endpoints:
            if name == "plain":
                rows += run_endpoint(s, name, plain.endpoint, source)
                if s.tune:
                    tuning += run_tuning(s, name, plain.endpoint, source)
                continue
            label = f"modelled({s.latency_ms:g}ms,{s.stream_mbps:g}MB/s)"
            with LocalGCS(
                data_dir=data_dir, latency_ms=s.latency_ms, stream_mbps=s.stream_mbps
            ) as modelled:
                rows += run_endpoint(s, label, modelled.endpoint, source)
                if s.tune:
                    tuning += run_tuning(s, label, modelled.endpoint, source)
    range_rows.add_ratios(rows)
    range_rows.add_ratios(tuning)
    print(range_rows.format_table("range reads (MB/s of useful bytes)", rows), flush=True)
    if tuning:
        print("\n" + range_rows.format_table("reader tuning sweep", tuning), flush=True)
    settings = dataclasses.asdict(s)
    settings["seconds_total"] = time.perf_counter() - started
    range_rows.write_json(output, settings, host, rows, tuning)
    log(f"wrote {output} ({settings['seconds_total']:.0f} s)")
    if not all(r.verified for r in rows + tuning):
        raise RuntimeError("some reads returned wrong bytes: see the 'ok' column")
    if not s.data_dir:
        import shutil

        shutil.rmtree(data_dir, ignore_errors=True)
    return {"rows": rows, "tuning": tuning}
