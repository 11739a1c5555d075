"""The names of the result rows' columns that more than one module reads (the row builders in
``metrics``, ``save_columns`` and ``train.train_rows``, the comparisons in ``compare``, the tables
and the chart); every column is in ``publish/bigquery_schema.json``.

A load row (``checkpoint_read``) has its throughput and ratios in the ``checkpoint_read_*``
columns (``READ``), a save row (``checkpoint_write``) in the ``checkpoint_write_*`` ones
(``WRITE``); each leaves the other scenario's null. ``rate_columns(row)`` picks a row's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ckptbench.record.case_result import SCENARIO_READ, SCENARIO_WRITE

WORKLOAD_FAMILY = "checkpointing"
# The training benchmark's columns (``ckptbench.train.train_rows``); null on load and save rows.
TRAIN_COLUMNS = (
    "train_checkpoint_count",
    "train_lost_seconds_per_checkpoint",
    "train_blocked_seconds_per_checkpoint",
    "train_step_inflation_ratio",
    "train_time_to_durable_seconds",
    "train_rss_peak_over_control_bytes",
    "train_client_cpu_seconds_per_gb",
    "train_measures_json",
)
# Per-round throughput statistics and the comparisons every scenario's rate columns have.
RATE_STATS = ("mean", "min", "max", "p50", "p90", "p99")
RATE_RATIOS = ("baseline", "best_peer", "reference", "ceiling")


@dataclasses.dataclass(frozen=True)
class RateColumns:
    """The throughput columns of one scenario (bytes/s) and its ratios (dimensionless).

    Attributes:
      scenario: ``checkpoint_read`` or ``checkpoint_write``.
      prefix: ``checkpoint_read_throughput`` or ``checkpoint_write_throughput``.
      options: the column of the arm's settings (``reader_options_json``,
        ``writer_options_json``).
    """

    scenario: str
    prefix: str
    options: str

    def stat(self, name: str) -> str:
        """``<prefix>_<name>_bytes_per_second`` for ``name`` in ``RATE_STATS``.

        Raises:
          ValueError: an unknown statistic.
        """
        if name not in RATE_STATS:
            raise ValueError(f"throughput statistic {name!r} is unknown; known: {RATE_STATS}")
        return f"{self.prefix}_{name}_bytes_per_second"

    def ratio(self, to: str) -> str:
        """``<prefix>_ratio_to_<to>`` for ``to`` in ``RATE_RATIOS``.

        Raises:
          ValueError: an unknown comparison.
        """
        if to not in RATE_RATIOS:
            raise ValueError(f"throughput ratio to {to!r} is unknown; known: {RATE_RATIOS}")
        return f"{self.prefix}_ratio_to_{to}"

    @property
    def mean(self) -> str:
        """The mean per-round throughput column."""
        return self.stat("mean")

    @property
    def all(self) -> tuple[str, ...]:
        """Every column of the scenario: the statistics, then the ratios."""
        return tuple(self.stat(n) for n in RATE_STATS) + tuple(self.ratio(r) for r in RATE_RATIOS)


READ = RateColumns(SCENARIO_READ, "checkpoint_read_throughput", "reader_options_json")
WRITE = RateColumns(SCENARIO_WRITE, "checkpoint_write_throughput", "writer_options_json")


def rate_columns(row: Mapping[str, Any]) -> RateColumns:
    """The rate columns of ``row``'s scenario: ``WRITE`` for a save row, else ``READ`` (load
    rows, and training rows, whose throughput columns are all null)."""
    return WRITE if row.get("workload_scenario") == SCENARIO_WRITE else READ


def throughput(row: Mapping[str, Any] | None) -> float | None:
    """The row's mean throughput in its own scenario's column (bytes/s), None when the row is
    missing, not ok or did not measure one."""
    if row is None or row.get("status") != "ok":
        return None
    return row.get(rate_columns(row).mean)


DATA_PHASE_THROUGHPUT_COLUMN = "save_data_phase_throughput_mean_bytes_per_second"
CEILING_COLUMN = "endpoint_ceiling_bytes_per_second"
CLIENT_CPU_PER_GB_COLUMN = "client_cpu_seconds_per_gb"
ENDPOINT_CPU_PER_GB_COLUMN = "endpoint_cpu_seconds_per_gb"
STORAGE_RATIO_COLUMN = "storage_bytes_per_checkpoint_byte"
