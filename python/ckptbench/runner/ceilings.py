"""The endpoint's raw upload and download ceilings, measured after the cases on the run's local
endpoint and printed; each becomes its cases' ceiling in the summary tables."""

from __future__ import annotations

from collections.abc import Callable

from ckptbench.ceiling.download import measure_download_ceiling
from ckptbench.ceiling.upload import measure_upload_ceiling
from ckptbench.runner.config import RunConfig
from ckptbench.runner.manifest import delete_prefix
from ckptbench.runner.storage import BenchStorage
from gcsckpt.io.defaults import MAX_INFLIGHT_UPLOADS

# The upload ceiling's shape: as many uploads in flight as the gcsckpt writer keeps by default,
# each 64 MiB (long enough that per-request costs do not count).
CEILING_OBJECT_BYTES = 64 << 20
CEILING_CONCURRENCY = MAX_INFLIGHT_UPLOADS


def _ceiling(
    say: Callable[[str], None],
    storage: BenchStorage,
    kind: str,
    rounds: int,
    measure,
    round_bytes,
    how,
) -> float | None:
    """The endpoint's raw `kind` ("upload"/"download") ceiling in bytes/s (median of the
    rounds), measured now by ``measure(prefix)`` under ``<prefix>/<kind>-ceiling`` and printed
    (``round_bytes(ceiling)`` bytes per round; ``how(ceiling)`` describes the requests); None
    when not asked for (``rounds`` 0) or on real GCS (the measurement sends no credentials).
    Its objects are deleted afterwards."""
    if rounds == 0 or storage.endpoint is None:
        return None
    prefix = "/".join(p for p in (storage.prefix, f"{kind}-ceiling") if p)
    ceiling = measure(prefix)
    delete_prefix(storage.client, storage.bucket, prefix)
    rates = ", ".join(f"{round_bytes(ceiling) / t / 1e6:.0f}" for t in ceiling.seconds)
    say(
        f"{kind.capitalize()} ceiling of the endpoint: {ceiling.median_bytes_per_s / 1e6:.1f} MB/s"
        f" median ({rates} MB/s per round; {how(ceiling)}, {ceiling.method})"
    )
    return ceiling.median_bytes_per_s


def upload_ceiling(
    say: Callable[[str], None], config: RunConfig, storage: BenchStorage
) -> float | None:
    """The upload ceiling (``ceiling.upload``: parallel media uploads), see :func:`_ceiling`."""
    return _ceiling(
        say,
        storage,
        "upload",
        config.upload_ceiling_rounds,
        lambda prefix: measure_upload_ceiling(
            storage.endpoint,
            storage.bucket,
            object_bytes=CEILING_OBJECT_BYTES,
            concurrency=CEILING_CONCURRENCY,
            rounds=config.upload_ceiling_rounds,
            prefix=prefix,
        ),
        lambda c: c.bytes_per_round,
        lambda c: f"{c.concurrency} x {c.object_bytes >> 20} MiB",
    )


def download_ceiling(
    say: Callable[[str], None], config: RunConfig, storage: BenchStorage
) -> float | None:
    """The download ceiling (``ceiling.download``: 16 parallel 8 MiB ranged GETs of one 256 MiB
    object), see :func:`_ceiling`."""
    return _ceiling(
        say,
        storage,
        "download",
        config.download_ceiling_rounds,
        lambda prefix: measure_download_ceiling(
            storage.endpoint, storage.bucket, rounds=config.download_ceiling_rounds, prefix=prefix
        ),
        lambda c: c.object_bytes,
        lambda c: (
            f"{c.concurrency} x {c.range_bytes >> 20} MiB ranged GETs of {c.object_bytes >> 20} MiB"
        ),
    )
