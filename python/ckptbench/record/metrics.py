"""Turns one CaseResult (loads) or SaveResult (saves) into one flat result row (the columns of
bigquery_schema.json); the comparisons between rows (ratios to the baseline, peers, reference,
ceiling) are ``compare``'s, a save's memory and phase columns ``save_columns``'.

Column names follow the gcsfs subsystem benchmarks where they overlap (fsspec/gcsfs,
cloudbuild/subsystembenchmarks/subsystembenchmarks_schema.json: ``round_duration_p99_seconds``,
``checkpoint_read_throughput_mean_bytes_per_second``, ``dcp_read_items_per_rank_max``,
``cpu_usage_peak_cores`` ...), so rows can land in the same BigQuery tables. Like gcsfs, the mean
throughput is the mean of per-round throughputs, and the reader's name is
``workload_implementation``. Save rows mirror the read throughput columns as
``checkpoint_write_throughput_*`` (``columns.WRITE``), the writer's name being their
``workload_implementation`` and its settings ``writer_options_json``.

Every row carries every column; a value the run could not measure is None (null), never a guess.
Rows hold only str, int, float, bool and None, so they serialize to JSON, CSV and BigQuery as is.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ckptbench.record.case_result import STATUS_OK, ArmOutcome, CaseResult, RunContext, SaveResult
from ckptbench.record.columns import (
    CEILING_COLUMN,
    CLIENT_CPU_PER_GB_COLUMN,
    ENDPOINT_CPU_PER_GB_COLUMN,
    RATE_STATS,
    READ,
    STORAGE_RATIO_COLUMN,
    TRAIN_COLUMNS,
    WORKLOAD_FAMILY,
    WRITE,
    RateColumns,
)
from ckptbench.record.host import HostFacts
from ckptbench.record.rank_rounds import COUNT_FIELDS, SECONDS_FIELDS, RoundRecord
from ckptbench.record.resources import ResourceUsage
from ckptbench.record.save_columns import save_columns
from ckptbench.workloads.parallel.dims import SIZE_NAMES

Row = dict[str, Any]

_GB = 1e9

_PERCENTILES = (50, 90, 95, 99)


def iso_timestamp(moment: datetime.datetime) -> str:
    """UTC ISO-8601 text with microseconds and ``Z`` (what BigQuery and bqemulator accept)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def round_duration_columns(durations: Sequence[float]) -> Row:
    """``round_duration_{min,max,mean,p50,p90,p95,p99,stddev}_seconds`` of the durations (s).

    Percentiles interpolate linearly (numpy's default); stddev is the sample standard deviation
    (n - 1), None for fewer than two rounds. All None when there are no durations.
    """
    names = ["min", "max", "mean", *(f"p{q}" for q in _PERCENTILES), "stddev"]
    if not durations:
        return {f"round_duration_{name}_seconds": None for name in names}
    values = np.asarray(durations, dtype=np.float64)
    row = {
        "round_duration_min_seconds": float(values.min()),
        "round_duration_max_seconds": float(values.max()),
        "round_duration_mean_seconds": float(values.mean()),
    }
    for q in _PERCENTILES:
        row[f"round_duration_p{q}_seconds"] = float(np.percentile(values, q))
    row["round_duration_stddev_seconds"] = float(values.std(ddof=1)) if len(values) > 1 else None
    return row


def throughput_columns(
    durations: Sequence[float], bytes_per_round: int | None, rates: RateColumns = READ
) -> Row:
    """Per-round throughput ``bytes_per_round / duration`` (bytes/s) in ``rates``' columns
    (``READ``: ``checkpoint_read_throughput_*``, ``WRITE``: ``checkpoint_write_throughput_*``):
    mean, min, max, p50/p90/p99.

    All None when the size is unknown, there are no rounds, or a round took zero seconds.
    """
    columns: Row = {rates.stat(n): None for n in RATE_STATS}
    if bytes_per_round is None or not durations or min(durations) <= 0:
        return columns
    values = bytes_per_round / np.asarray(durations, dtype=np.float64)
    columns.update(
        {
            rates.stat("mean"): float(values.mean()),
            rates.stat("min"): float(values.min()),
            rates.stat("max"): float(values.max()),
        }
    )
    for q in (50, 90, 99):
        columns[rates.stat(f"p{q}")] = float(np.percentile(values, q))
    return columns


def rate_columns_of(
    rates: RateColumns, durations: Sequence[float], bytes_per_round: int | None
) -> Row:
    """Both scenarios' rate columns of one row: ``rates``' throughput (``throughput_columns``)
    with its ratios None (``compare`` fills them in), and every column of the other scenario
    None (a load row has no write throughput, a save row no read throughput)."""
    columns: Row = {}
    for scenario in (READ, WRITE):
        columns.update(dict.fromkeys(scenario.all))
    columns.update(throughput_columns(durations, bytes_per_round, rates))
    return columns


def _counter_samples(rounds: Sequence[RoundRecord], field: str) -> list[list[Any]] | None:
    """Per round, per rank values of one counter; None if any round or rank lacks it."""
    if not rounds or any(r.rank_counters is None for r in rounds):
        return None
    per_round = [[getattr(c, field) for c in r.rank_counters] for r in rounds]
    if any(v is None for values in per_round for v in values):
        return None
    return per_round


def _flat(per_round: list[list[Any]] | None) -> list[Any] | None:
    return None if per_round is None else [v for values in per_round for v in values]


def _max(values: list[Any] | None) -> Any:
    return None if values is None else max(values)


def _mean(values: list[Any] | None) -> float | None:
    return None if values is None else float(np.mean(values))


def _per_round_mean(per_round: list[list[Any]] | None) -> float | None:
    return None if per_round is None else float(np.mean([sum(v) for v in per_round]))


def counter_columns(rounds: Sequence[RoundRecord]) -> Row:
    """Reader-counter columns over all rounds and ranks.

    ``*_per_rank_max`` / ``*_per_rank_mean`` range over every (round, rank) pair;
    ``*_per_round_mean`` sums over ranks, then averages over rounds. A column is None when any
    rank of any round lacks that counter. ``read_amplification_ratio`` is bytes fetched over
    bytes needed for the whole case; the per-rank maximum skips ranks that needed no bytes.
    """
    samples = {field: _counter_samples(rounds, field) for field in COUNT_FIELDS + SECONDS_FIELDS}
    items, requests = _flat(samples["read_items"]), _flat(samples["requests"])
    needed, fetched = _flat(samples["bytes_needed"]), _flat(samples["bytes_fetched"])
    retries = _flat(samples["retries"])

    amplification = amplification_max = None
    if needed is not None and fetched is not None:
        if sum(needed) > 0:
            amplification = sum(fetched) / sum(needed)
        per_rank = [f / n for f, n in zip(fetched, needed, strict=True) if n > 0]
        amplification_max = max(per_rank) if per_rank else None

    return {
        "dcp_read_items_per_rank_max": _max(items),
        "dcp_read_items_per_rank_mean": _mean(items),
        "read_range_count_per_rank_max": _max(_flat(samples["ranges"])),
        "read_request_count_per_rank_max": _max(requests),
        "read_request_count_per_rank_mean": _mean(requests),
        "read_request_count_per_round_mean": _per_round_mean(samples["requests"]),
        "read_bytes_needed_per_rank_max": _max(needed),
        "read_bytes_fetched_per_rank_max": _max(fetched),
        "read_bytes_needed_per_round_mean": _per_round_mean(samples["bytes_needed"]),
        "read_bytes_fetched_per_round_mean": _per_round_mean(samples["bytes_fetched"]),
        "read_bytes_verified_per_round_mean": _per_round_mean(samples["bytes_verified"]),
        "read_amplification_ratio": amplification,
        "read_amplification_per_rank_max": amplification_max,
        "read_retry_count_total": None if retries is None else sum(retries),
        "read_retry_count_per_rank_max": _max(retries),
        "read_fetch_seconds_per_rank_max": _max(_flat(samples["fetch_s"])),
        "read_deserialize_seconds_per_rank_max": _max(_flat(samples["deserialize_s"])),
        "read_copy_seconds_per_rank_max": _max(_flat(samples["copy_s"])),
    }


def resource_columns(usage: ResourceUsage | None) -> Row:
    """Process-tree CPU (cores), memory (bytes) and host network (bytes, bytes/s) columns."""
    if usage is None:
        usage_dict: dict[str, Any] = {}
        rate_recv = rate_sent = None
    else:
        usage_dict = {
            "cpu_usage_peak_cores": usage.cpu_peak_cores,
            "cpu_usage_mean_cores": usage.cpu_mean_cores,
            "memory_usage_peak_bytes": usage.memory_peak_bytes,
            "memory_usage_peak_bytes_per_process_max": usage.memory_peak_bytes_per_process_max,
            "network_received_bytes": usage.network_received_bytes,
            "network_sent_bytes": usage.network_sent_bytes,
            "resource_sample_count": usage.sample_count,
        }
        window = usage.duration_s
        rate_recv = usage.network_received_bytes / window if window > 0 else None
        rate_sent = usage.network_sent_bytes / window if window > 0 else None
    names = (
        "cpu_usage_peak_cores",
        "cpu_usage_mean_cores",
        "memory_usage_peak_bytes",
        "memory_usage_peak_bytes_per_process_max",
        "network_received_bytes",
        "network_sent_bytes",
        "resource_sample_count",
    )
    row = {name: usage_dict.get(name) for name in names}
    row["network_received_mean_bytes_per_sec"] = rate_recv
    row["network_sent_mean_bytes_per_sec"] = rate_sent
    return row


def cpu_per_gb_columns(usage: ResourceUsage | None, moved_bytes: int | None) -> Row:
    """Client and endpoint CPU seconds inside the timed rounds (``ResourceUsage``'s split), and
    each per GB moved (``moved_bytes`` / 1e9: the rounds' bytes loaded or saved); None where
    not measured, or per GB when ``moved_bytes`` is unknown or 0."""
    client = None if usage is None else usage.client_cpu_seconds
    endpoint = None if usage is None else usage.endpoint_cpu_seconds
    gigabytes = moved_bytes / _GB if moved_bytes else None
    return {
        "client_cpu_seconds": client,
        CLIENT_CPU_PER_GB_COLUMN: None if client is None or not gigabytes else client / gigabytes,
        "endpoint_cpu_seconds": endpoint,
        ENDPOINT_CPU_PER_GB_COLUMN: (
            None if endpoint is None or not gigabytes else endpoint / gigabytes
        ),
    }


def storage_ratio(counters: Row, size: int | None) -> float | None:
    """Bytes the ranks fetched from storage per round (``counter_columns``' per-round mean of
    the sum over ranks) over the checkpoint's stored bytes (``checkpoint_physical_size_bytes``,
    ``.metadata`` included, which ``bytes_fetched`` leaves out): ~1.0 when each byte is read
    once per job, ~``data_parallel_replicate_size`` when every replica group reads all of it.
    None when the reader does not count fetched bytes or the size is unknown or 0."""
    fetched = counters.get("read_bytes_fetched_per_round_mean")
    if fetched is None or not size:
        return None
    return fetched / size


def host_columns(host: HostFacts) -> Row:
    """Host and software columns."""
    return {
        "host_vcpu_count": host.vcpu_count,
        "host_cpu_affinity_count": host.cpu_affinity_count,
        "host_machine_architecture": host.machine_architecture,
        "host_memory_total_bytes": host.memory_total_bytes,
        "host_os_release": host.os_release,
        "python_version": host.python_version,
        "torch_version": host.torch_version,
        "transformers_version": host.transformers_version,
        "benchmark_source_commit_sha": host.source_commit_sha,
        "compute_accelerator_name": host.accelerator_name,
    }


def _json_text(value: Any, what: str) -> str:
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} is not JSON-serializable: {err}") from err


def run_columns(run: RunContext) -> Row:
    """The columns every row of a run shares: its id and start, the endpoint, backend, device
    and host facts."""
    return {
        "run_id": run.run_id,
        "run_started_at": iso_timestamp(run.started_at),
        "gcs_bucket_name": run.gcs_bucket_name,
        "storage_endpoint": run.storage_endpoint,
        "endpoint_modelled_latency_ms": run.endpoint_modelled_latency_ms,
        "endpoint_modelled_stream_mbps": run.endpoint_modelled_stream_mbps,
        "distributed_backend": run.distributed_backend,
        "compute_accelerator_type": run.compute_accelerator_type,
        **host_columns(run.host),
    }


def case_row(result: ArmOutcome, run: RunContext) -> Row:
    """The flat result row of one case under one arm: a reader's loads (``CaseResult``,
    ``checkpoint_read``) or a writer's saves (``SaveResult``, ``checkpoint_write``).

    Load throughput per round, in the ``checkpoint_read_throughput_*`` columns, is
    ``checkpoint_physical_size_bytes × checkpoint_read_count ÷ round duration`` with
    ``checkpoint_read_count = data_parallel_replicate_size`` (each replica group reads the whole
    checkpoint); ``reader_options_json`` holds the reader's settings. Save throughput per round,
    in the ``checkpoint_write_throughput_*`` columns, is the bytes one save wrote (replicated
    entries are written once) ÷ round duration; ``writer_options_json`` holds the writer's
    settings, and the save row also has the ranks' memory and phase columns
    (``save_columns.save_columns``) and ``rank_saves_json``, the last round's per-rank RankSave
    measures. Each row leaves the other scenario's columns null (a save row's
    ``checkpoint_read_count``, reader counters, ``rank_counters_json`` and ``reader_options_json``
    included). For a failed result the round-duration and throughput columns are None (its
    timings are not a valid measurement) while counters and resources stay, for diagnosis.
    ``rank_counters_json`` holds a load's last round's per-rank counters.

    Raises:
      ValueError: arm options that are not JSON-serializable.
      TypeError: ``result`` is neither a CaseResult nor a SaveResult.
    """
    if isinstance(result, SaveResult):
        rates, options, read_count = WRITE, result.writer_options, None
        bytes_factor = 1
    elif isinstance(result, CaseResult):
        rates, options = READ, result.reader_options
        read_count = bytes_factor = result.case.dims.dp_replicate
    else:
        raise TypeError(f"case_row takes a CaseResult or SaveResult, got {type(result).__name__}")
    case = result.case
    arm = result.implementation
    ok = result.status == STATUS_OK
    rounds = list(result.rounds)
    durations = [r.duration_s for r in rounds] if ok else []
    size = result.checkpoint_physical_size_bytes
    bytes_per_round = None if size is None else size * bytes_factor
    saving = rates is WRITE
    counted = [] if saving else rounds  # reader counters: a save row's stay null
    last_counters = counted[-1].rank_counters if counted else None
    last_saves = rounds[-1].rank_saves if rounds else None
    counters = counter_columns(counted)
    moved = None if bytes_per_round is None or not ok else bytes_per_round * len(rounds)

    row: Row = {
        **run_columns(run),
        "benchmark_case_id": case.name,
        "workload_family": WORKLOAD_FAMILY,
        "workload_scenario": result.scenario,
        "workload_implementation": arm,
        "config_sweep_axis": case.sweep_axis,
        "model_id": case.model_id,
        "model_scale": case.model_scale,
        "checkpoint_strategy": case.dims.strategy,
        "checkpoint_saved_layout": case.saved_layout,
        "world_size": case.dims.world_size,
        **{column: getattr(case.dims, dim) for dim, column in SIZE_NAMES.items()},
        "status": result.status,
        "error_message": result.error_message,
        "checksums_verified": bool(result.checksums_verified),
        READ.options: None,
        WRITE.options: None,
        rates.options: _json_text(dict(options), f"{rates.options} of {arm!r}"),
        "checkpoint_physical_size_bytes": size,
        "checkpoint_object_count": None if saving else result.checkpoint_object_count,
        "checkpoint_read_count": read_count,
        "measurement_round_count": len(rounds),
        "measurement_window_start_unix_seconds": (
            math.floor(min(min(r.rank_start_unix_s) for r in rounds)) if rounds else None
        ),
        "measurement_window_end_unix_seconds": (
            math.ceil(max(max(r.rank_end_unix_s) for r in rounds)) if rounds else None
        ),
        **round_duration_columns(durations),
        **rate_columns_of(rates, durations, bytes_per_round),
        "baseline_implementation": None,
        "best_peer_implementation": None,
        "reference_implementation": None,
        CEILING_COLUMN: None,
        **counters,
        STORAGE_RATIO_COLUMN: None if saving else storage_ratio(counters, size),
        "rank_counters_json": (
            None
            if last_counters is None
            else _json_text([c.as_dict() for c in last_counters], "rank counters")
        ),
        **save_columns(rounds, bytes_per_round, timed=ok),
        "rank_saves_json": (
            None
            if last_saves is None
            else _json_text([m.as_dict() for m in last_saves], "rank save measures")
        ),
        **dict.fromkeys(TRAIN_COLUMNS),
        **resource_columns(result.resources),
        **cpu_per_gb_columns(result.resources, moved),
    }
    return row
