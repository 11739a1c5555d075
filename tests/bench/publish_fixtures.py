"""Builders of known CaseResults/SaveResults and rows shared by the metrics and publisher
tests."""

from __future__ import annotations

import datetime

from ckptbench.record.case_result import CaseInfo, CaseResult, RunContext, SaveResult
from ckptbench.record.compare import add_baseline_ratios
from ckptbench.record.host import HostFacts
from ckptbench.record.metrics import case_row
from ckptbench.record.rank_rounds import RankCounters, RankSave, RoundRecord
from ckptbench.record.resources import ResourceUsage
from ckptbench.workloads.parallel.dims import ParallelDims

HOST = HostFacts(
    vcpu_count=2,
    cpu_affinity_count=2,
    machine_architecture="x86_64",
    memory_total_bytes=24 * 2**30,
    os_release="6.1.0",
    python_version="3.11.2",
    torch_version="2.13.0+cpu",
    transformers_version="4.46.3",
    source_commit_sha="0" * 40,
    accelerator_name=None,
)
STARTED = datetime.datetime(2026, 11, 30, 12, 0, 0, 250000, tzinfo=datetime.UTC)
RUN = RunContext(
    run_id="run-1",
    started_at=STARTED,
    host=HOST,
    storage_endpoint="local",
    gcs_bucket_name="bench",
    distributed_backend="gloo",
    compute_accelerator_type="cpu",
)
SIZE = 1_000_000_000  # checkpoint bytes


def case(name: str = "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2", replicate: int = 1) -> CaseInfo:
    return CaseInfo(
        name=name,
        model_id="olmoe_1b_7b_0924",
        dims=ParallelDims(
            strategy="hsdp" if replicate > 1 else "ep",
            world_size=2 * replicate,
            dp_shard=2,
            dp_replicate=replicate,
            ep=1 if replicate > 1 else 2,
        ),
        sweep_axis="strategy",
        model_scale="tiny",
    )


def counters(rank: int, requests: int = 10) -> RankCounters:
    return RankCounters(
        read_items=100 + rank,
        ranges=4,
        requests=requests + rank,
        bytes_needed=1000,
        bytes_fetched=1000 + 10 * rank,
        retries=rank,
        bytes_verified=1000 - rank,
        fetch_s=0.5,
        deserialize_s=0.25,
        copy_s=0.125,
    )


def round_of(durations_by_rank: list[tuple[float, float]], with_counters: bool = True):
    """A RoundRecord from (start, end) pairs, with counters() per rank."""
    return RoundRecord(
        rank_start_unix_s=[s for s, _ in durations_by_rank],
        rank_end_unix_s=[e for _, e in durations_by_rank],
        rank_counters=[counters(r) for r in range(len(durations_by_rank))]
        if with_counters
        else None,
    )


USAGE = ResourceUsage(
    duration_s=4.0,
    sample_count=17,
    cpu_peak_cores=1.75,
    cpu_mean_cores=1.25,
    memory_peak_bytes=3 * 2**30,
    memory_peak_bytes_per_process_max=2**30,
    network_received_bytes=8_000_000,
    network_sent_bytes=4_000_000,
)


def result(reader: str, seconds: list[float], name: str | None = None) -> CaseResult:
    """An ok 2-rank result whose rounds last exactly ``seconds`` (rank 1 starts 0.5 s late)."""
    t0 = 1_800_000_000.0
    rounds = []
    for i, d in enumerate(seconds):
        start = t0 + 10 * i
        rounds.append(round_of([(start, start + d), (start + 0.5, start + d)]))
    return CaseResult(
        case=case(name) if name else case(),
        reader=reader,
        rounds=rounds,
        checksums_verified=True,
        checkpoint_physical_size_bytes=SIZE,
        checkpoint_object_count=3,
        reader_options={"max_inflight_requests": 16, "chunk_bytes": 8 << 20},
        resources=USAGE,
    )


def failed(reader: str, name: str | None = None, message: str = "endpoint died") -> CaseResult:
    return CaseResult(
        case=case(name) if name else case(),
        reader=reader,
        status="failed",
        error_message=message,
        checkpoint_physical_size_bytes=SIZE,
    )


def two_reader_rows() -> list[dict]:
    """gcsckpt at 1 s/round (1 GB/s) and fsspec at 50 s/round (20 MB/s) on one case, plus a
    second case where fsspec failed."""
    rows = [
        case_row(result("gcsckpt", [1.0, 1.0]), RUN),
        case_row(result("fsspec", [50.0, 50.0]), RUN),
        case_row(result("gcsckpt", [2.0, 2.0], name="load-olmoe_1b_7b_0924-fsdp-ws2"), RUN),
        case_row(failed("fsspec", name="load-olmoe_1b_7b_0924-fsdp-ws2"), RUN),
    ]
    return add_baseline_ratios(rows)


SAVE_CASE = "save-olmoe_1b_7b_0924-ep-dp2ep2-ws2"
MiB = 2**20
STATE = 100 * MiB  # rank 0's state bytes in the save fixtures; rank 1 holds 10 MiB more


def rank_save(rank: int, start: float, data_s: float, rss_peak: int) -> RankSave:
    """Rank ``rank``'s measures of a save that began at ``start``: the data phase starts 1 s in
    and lasts ``data_s``; RSS starts at 200 MiB; the coordinator (rank 0) finished in 0.25 s."""
    return RankSave(
        state_bytes=STATE + rank * 10 * MiB,
        rss_start_bytes=200 * MiB,
        rss_peak_bytes=rss_peak,
        rss_sample_count=50,
        plan_s=0.01 * (rank + 1),
        data_start_unix_s=start + 1.0,
        data_end_unix_s=start + 1.0 + data_s,
        finish_s=0.25 if rank == 0 else None,
    )


def save_result(
    writer: str, seconds: list[float], data_s: list[float], peaks=(None, None)
) -> SaveResult:
    """An ok 2-rank save (case ``SAVE_CASE``, SIZE bytes written) whose rounds last ``seconds``;
    in round i rank 0's data phase lasts ``data_s[i]`` and rank 1's half that. Peak RSS per
    rank: ``peaks`` (None: 300 MiB, within either rank's bound)."""
    t0 = 1_800_000_000.0
    rounds = []
    for i, (d, data) in enumerate(zip(seconds, data_s, strict=True)):
        start = t0 + 10 * i
        saves = [rank_save(r, start, data / (r + 1), peaks[r] or 300 * MiB) for r in range(2)]
        rounds.append(
            RoundRecord(
                rank_start_unix_s=[start, start],
                rank_end_unix_s=[start + d, start + d],
                rank_saves=saves,
            )
        )
    return SaveResult(
        case=case(SAVE_CASE),
        writer=writer,
        rounds=rounds,
        checksums_verified=True,
        checkpoint_physical_size_bytes=SIZE,
        writer_options={"class": writer},
        resources=USAGE,
    )


def save_rows() -> list[dict]:
    """Saves of one case with ratios: gcsckpt 2 s (data phase 1 s), msc 4 s (data 3 s), localfs
    1 s (data 0.25 s, rank 1's peak 600 MiB: over its bound of 1.1 x 110 MiB + 256 MiB)."""
    rows = [
        case_row(save_result("gcsckpt", [2.0], [1.0]), RUN),
        case_row(save_result("msc", [4.0], [3.0]), RUN),
        case_row(save_result("localfs", [1.0, 1.0], [0.25, 0.25], (None, 600 * MiB)), RUN),
    ]
    return add_baseline_ratios(rows)
