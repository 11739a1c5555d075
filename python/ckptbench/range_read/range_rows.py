"""Range-read benchmark results: one row per (endpoint, range size, client, concurrency), the
ratios to gcsfs and to the raw ceiling; printed as a Markdown table and written as a JSON document
through ``ckptbench.publish`` (the checkpoint benchmark's table and file writers)."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ckptbench.publish.markdown import markdown_table, number_cell
from ckptbench.publish.row_files import write_json_document

GiB = 1 << 30


@dataclasses.dataclass
class Row:
    """One measured configuration; per-round lists hold one value per timed round."""

    endpoint: str
    group: str  # range-size group it was timed in (the ceiling runs in every group)
    range_size: str
    range_bytes: int
    ranges: int
    client: str
    concurrency: int | None
    useful_bytes: int  # bytes the caller asked for, per round
    seconds: list[float]
    cpu_seconds: list[float]  # process CPU (all threads), per round
    requests: list[int | None]
    bytes_received: list[int | None]
    verified: bool
    params: dict = dataclasses.field(default_factory=dict)
    vs_gcsfs: float | None = None
    vs_ceiling: float | None = None

    @property
    def mb_per_s(self) -> float:
        """Useful MB/s (1 MB = 1e6 bytes) of the median round."""
        return self.useful_bytes / statistics.median(self.seconds) / 1e6

    @property
    def req_per_s(self) -> float | None:
        if self.requests[0] is None:
            return None
        return statistics.median(r / s for r, s in zip(self.requests, self.seconds, strict=True))

    @property
    def cpu_s_per_gib(self) -> float:
        return statistics.median(self.cpu_seconds) / (self.useful_bytes / GiB)

    @property
    def amplification(self) -> float | None:
        """Bytes received per useful byte (coalesced gaps make it > 1)."""
        if self.bytes_received[0] is None:
            return None
        return self.bytes_received[0] / self.useful_bytes

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(
            mb_per_s=self.mb_per_s,
            req_per_s=self.req_per_s,
            cpu_s_per_gib=self.cpu_s_per_gib,
            amplification=self.amplification,
        )
        return d


CEILING_PREFIX = "raw ceiling"


def add_ratios(rows: list[Row]) -> None:
    """Fills vs_gcsfs (MB/s over gcsfs's) and vs_ceiling (MB/s over the raw parallel-GET
    ceiling), each against the row of the same endpoint and group (timed in the same rounds)."""
    gcsfs = {(r.endpoint, r.group): r.mb_per_s for r in rows if r.client == "gcsfs.cat_ranges"}
    ceiling = {
        (r.endpoint, r.group): r.mb_per_s for r in rows if r.client.startswith(CEILING_PREFIX)
    }
    for r in rows:
        base = gcsfs.get((r.endpoint, r.group))
        same_ranges = not r.client.startswith(CEILING_PREFIX)  # the ceiling reads other ranges
        r.vs_gcsfs = r.mb_per_s / base if base and same_ranges else None
        top = ceiling.get((r.endpoint, r.group))
        r.vs_ceiling = r.mb_per_s / top if top else None


_HEADER = (
    "endpoint",
    "ranges",
    "client",
    "conc",
    "MB/s",
    "req/s",
    "CPU s/GiB",
    "ampl",
    "x gcsfs",
    "x ceiling",
    "ok",
)


def format_table(title: str, rows: Sequence[Row]) -> str:
    """The rows as a titled Markdown table, in run order (grouped by endpoint and range size)."""
    body = [
        (
            r.endpoint,
            f"{r.ranges} x {r.range_size}",
            r.client + "".join(f" {k}={v}" for k, v in r.params.items()),
            number_cell(r.concurrency, "d", missing="-"),
            number_cell(r.mb_per_s, ".0f", missing="-"),
            number_cell(r.req_per_s, ".0f", missing="-"),
            number_cell(r.cpu_s_per_gib, ".2f", missing="-"),
            number_cell(r.amplification, ".2f", missing="-"),
            number_cell(r.vs_gcsfs, ".2f", missing="-"),
            number_cell(r.vs_ceiling, ".2f", missing="-"),
            "yes" if r.verified else "NO",
        )
        for r in rows
    ]
    return f"### {title}\n\n{markdown_table(_HEADER, body)}"


def write_json(
    path: str | Path,
    settings: Mapping[str, Any],
    host: Mapping[str, Any],
    rows: Sequence[Row],
    tuning: Sequence[Row],
) -> None:
    """Writes ``{"settings", "host", "rows", "tuning"}`` to ``path`` (replaced atomically)."""
    doc = {
        "settings": dict(settings),
        "host": dict(host),
        "rows": [r.as_dict() for r in rows],
        "tuning": [r.as_dict() for r in tuning],
    }
    write_json_document(path, doc)
