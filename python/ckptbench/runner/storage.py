"""Where the benchmark's checkpoints live: the embedded local endpoint, an emulator, or real GCS.

Without ``--bucket`` the runner starts ``LocalGCS`` (emulator on disk + nginx) on a persistent
data folder (default ``~/.cache/gcsckpt/local-gcs``), so checkpoints saved by one run are reused
by the next. ``--bucket=gs://bucket[/prefix]`` targets that bucket: on GCS (Application Default
Credentials), or on an emulator when an endpoint is given (``STORAGE_EMULATOR_HOST``).
"""

from __future__ import annotations

import os

from ckptbench.worker.case_jobs import Storage
from gcsckpt.dcp.paths import parse_checkpoint_id
from gcsckpt.io import ObjectStore
from gcsckpt.testing import LocalGCS

LOCAL_BUCKET = "gcsckpt-bench"
DEFAULT_LOCAL_DIR = os.path.join("~", ".cache", "gcsckpt", "local-gcs")

ENDPOINT_LOCAL = "local"  # the embedded LocalGCS
ENDPOINT_EMULATOR = "emulator"  # a caller-run emulator at STORAGE_EMULATOR_HOST
ENDPOINT_GCS = "gcs"  # storage.googleapis.com


class BenchStorage:
    """A context manager that provides the bucket (starting LocalGCS when needed).

    Args:
      bucket_url: ``gs://bucket[/prefix]``; None: the local endpoint.
      endpoint: emulator URL for ``bucket_url``; None: real GCS. Ignored without a bucket.
      local_dir: LocalGCS data folder (``~`` expanded).
      latency_ms / stream_mbps: LocalGCS's modelled first-byte latency (ms) and per-stream
        cap (MB/s); only for the local endpoint.

    Raises:
      ValueError: latency or bandwidth modelling asked for a bucket that is not local.
    """

    def __init__(
        self,
        bucket_url: str | None = None,
        endpoint: str | None = None,
        local_dir: str = DEFAULT_LOCAL_DIR,
        latency_ms: float = 0.0,
        stream_mbps: float | None = None,
    ) -> None:
        if bucket_url is not None and (latency_ms or stream_mbps):
            raise ValueError("--latency_ms/--stream_mbps model the local endpoint; drop --bucket")
        self._local: LocalGCS | None = None
        self._local_dir = os.path.expanduser(local_dir)
        self._latency_ms = latency_ms
        self._stream_mbps = stream_mbps
        self._client: ObjectStore | None = None
        if bucket_url is None:
            self.kind, self.bucket, self.prefix, self.endpoint = (
                ENDPOINT_LOCAL,
                LOCAL_BUCKET,
                "",
                None,
            )
        else:
            location = parse_checkpoint_id(bucket_url)
            self.bucket, self.prefix = location.bucket, location.prefix
            self.endpoint = endpoint
            self.kind = ENDPOINT_EMULATOR if endpoint else ENDPOINT_GCS

    def __enter__(self) -> BenchStorage:
        if self.kind == ENDPOINT_LOCAL:
            os.makedirs(self._local_dir, exist_ok=True)
            self._local = LocalGCS(
                data_dir=self._local_dir,
                latency_ms=self._latency_ms,
                stream_mbps=self._stream_mbps,
            ).start()
            self.endpoint = self._local.endpoint
            # Every verified save round is deleted; with GCS's default soft delete the emulator
            # would copy each deleted object's bytes (~1 GB per round of the main job) and keep
            # them for the run, so the embedded bucket has none.
            self._local.create_bucket(self.bucket, soft_delete_retention_s=0)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._local is not None:
            self._local.stop()
            self._local = None

    @property
    def client(self) -> ObjectStore:
        """The ``gcsckpt.io.ObjectStore`` for the bucket's endpoint (made on first use; real GCS
        when no endpoint is set)."""
        if self._client is None:
            self._client = ObjectStore(self.endpoint)
        return self._client

    def for_case(self, case_name: str) -> Storage:
        """The case's object prefixes: ``<prefix>/<case>/checkpoint`` and ``.../setup``."""
        base = f"{self.prefix}/{case_name}" if self.prefix else case_name
        return Storage(
            bucket=self.bucket,
            checkpoint_prefix=f"{base}/checkpoint",
            setup_prefix=f"{base}/setup",
            endpoint=self.endpoint,
        )

    @property
    def endpoint_pids(self) -> list[int]:
        """The embedded endpoint's processes (``LocalGCS.process_ids``); empty for a
        caller-run emulator or real GCS (their CPU is not ours to sample)."""
        return self._local.process_ids if self._local is not None else []

    @property
    def url(self) -> str:
        """``gs://bucket[/prefix]``."""
        return f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}"
