"""RunConfig: everything one benchmark invocation was asked to do (built from flags or by tests)."""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any

from ckptbench.cases.catalogue import Case
from ckptbench.cases.selection import select_run_cases
from ckptbench.roles import BASELINE, CANDIDATE, PEERS, READERS, REFERENCES, WRITERS
from ckptbench.runner.bucket_type import run_bucket_type
from ckptbench.runner.storage import DEFAULT_LOCAL_DIR
from ckptbench.workloads.models.configs import SCALES
from gcsckpt.dcp.paths import parse_checkpoint_id

DEVICES = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A benchmark invocation.

    Attributes:
      cases: case names or globs; empty: every case on ``sweep_axes``.
      sweep_axes: catalogue axes (``strategy``, ``model``, ``reshard``); None: all.
      catalogue: catalogue YAML path; None: the shipped one.
      bucket: ``gs://bucket[/prefix]``; None: the embedded local endpoint.
      endpoint: emulator URL for ``bucket`` (None: real GCS).
      readers: readers to run, in order (``roles.READERS``); default: the two the runner
        started with (the programs' ``--readers`` default is every reader).
      writers: writers of the save phase, in order (``roles.WRITERS``: the readers' names and
        the ``localfs`` reference); empty: no save phase.
      save_rounds: timed saves per case and writer; None: same as ``rounds`` (or the case's).
      reference_rounds: timed saves of the reference writers (``roles.REFERENCES``: localfs);
        None: same as ``save_rounds``.
      save_cases: globs of the (load) case names the save phase runs on; empty: every case.
      rounds: timed rounds per case for every reader but the baseline; None: the case's.
      baseline_rounds: rounds for the ``fsspec`` baseline; None: same as ``rounds``.
      baseline_cases: globs of the (load) case names the ``fsspec`` baseline loads; empty:
        every case (it needs minutes per round on some).
      peer_rounds: rounds for the peer readers (``roles.PEERS``); None: same as ``rounds``.
      upload_ceiling_rounds: rounds of the endpoint's raw upload ceiling, measured after the
        save phase in the same run (MAX_INFLIGHT_UPLOADS parallel 64 MiB media uploads a round,
        ``bench.ceiling.upload``); 0: not measured. Emulator endpoints only (it sends no
        credentials); on real GCS it is not measured.
      download_ceiling_rounds: rounds of the endpoint's raw download ceiling, measured after
        the cases in the same run (``ceiling.download``: parallel 8 MiB ranged GETs); 0: not
        measured. Emulator endpoints only, like the upload ceiling.
      world_size_override: resize every case to this many ranks.
      model_scale: ``full``, ``scaled`` or ``tiny``.
      output_dir: results folder; None: ``~/.cache/gcsckpt/results/<run id>``.
      bigquery_table / bigquery_endpoint: publish rows there (endpoint: an emulator).
      device: ``cpu`` (gloo) or ``cuda`` (nccl, one rank per GPU).
      latency_ms / stream_mbps: modelled first-byte latency (ms) / per-stream cap (MB/s) of the
        local endpoint.
      local_gcs_dir: data folder of the local endpoint (kept between runs).
      force_setup: save checkpoints again even when a matching one exists.
      job_timeout_s: wall-clock limit of one job (setup, or one reader's rounds), seconds.
      list_only: print the selected case names and stop.
      train: the training phase (``ckptbench.train.run.TrainSettings``), run after the cases
        on the same endpoint (single machine only); None: none.

    Raises:
      ValueError: an unknown reader, scale or device; rounds < 1; a negative latency or a
        non-positive bandwidth, timeout or world size; a bucket that is not ``gs://...``;
        latency or bandwidth modelling with a bucket (the message names the flag).
    """

    cases: tuple[str, ...] = ()
    sweep_axes: tuple[str, ...] | None = None
    catalogue: str | None = None
    bucket: str | None = None
    endpoint: str | None = None
    readers: tuple[str, ...] = (CANDIDATE, BASELINE)
    writers: tuple[str, ...] = ()
    save_rounds: int | None = None
    reference_rounds: int | None = None
    save_cases: tuple[str, ...] = ()
    rounds: int | None = None
    baseline_rounds: int | None = None
    baseline_cases: tuple[str, ...] = ()
    peer_rounds: int | None = None
    upload_ceiling_rounds: int = 3
    download_ceiling_rounds: int = 3
    world_size_override: int | None = None
    model_scale: str = "scaled"
    output_dir: str | None = None
    bigquery_table: str | None = None
    bigquery_endpoint: str | None = None
    device: str = "cpu"
    latency_ms: float = 0.0
    stream_mbps: float | None = None
    local_gcs_dir: str = DEFAULT_LOCAL_DIR
    force_setup: bool = False
    job_timeout_s: float = 1800.0
    list_only: bool = False
    train: Any = None

    def __post_init__(self) -> None:
        unknown = [r for r in self.readers if r not in READERS]
        if unknown or not self.readers or len(set(self.readers)) != len(self.readers):
            raise ValueError(
                f"--readers {','.join(self.readers)!r}: give distinct names among "
                f"{', '.join(READERS)}"
            )
        unknown = [w for w in self.writers if w not in WRITERS]
        if unknown or len(set(self.writers)) != len(self.writers):
            raise ValueError(
                f"--writers {','.join(self.writers)!r}: give distinct names among "
                f"{', '.join(WRITERS)}"
            )
        if self.model_scale not in SCALES:
            raise ValueError(f"--model_scale {self.model_scale!r}: known {', '.join(SCALES)}")
        if self.device not in DEVICES:
            raise ValueError(f"--device {self.device!r}: known {', '.join(DEVICES)}")
        if self.download_ceiling_rounds < 0:
            raise ValueError(
                f"--download_ceiling_rounds must be >= 0, got {self.download_ceiling_rounds}"
            )
        if self.upload_ceiling_rounds < 0:
            raise ValueError(
                f"--upload_ceiling_rounds must be >= 0, got {self.upload_ceiling_rounds}"
            )
        for flag in (
            "rounds",
            "baseline_rounds",
            "peer_rounds",
            "save_rounds",
            "reference_rounds",
            "world_size_override",
        ):
            value = getattr(self, flag)
            if value is not None and value < 1:
                raise ValueError(f"--{flag} must be >= 1, got {value}")
        if self.latency_ms < 0:
            raise ValueError(f"--latency_ms must be >= 0, got {self.latency_ms}")
        if self.stream_mbps is not None and self.stream_mbps <= 0:
            raise ValueError(f"--stream_mbps must be > 0, got {self.stream_mbps}")
        if self.job_timeout_s <= 0:
            raise ValueError(f"--job_timeout_s must be > 0, got {self.job_timeout_s}")
        if self.bucket is None and self.endpoint is not None:
            raise ValueError("an emulator endpoint needs --bucket=gs://...")
        if self.bucket is not None:
            try:
                parse_checkpoint_id(self.bucket)
            except ValueError as e:
                raise ValueError(f"--bucket must look like gs://bucket[/prefix]: {e}") from None
            if self.latency_ms or self.stream_mbps:
                raise ValueError(
                    "--latency_ms/--stream_mbps model the local endpoint; drop --bucket"
                )

    def rounds_for(self, reader: str, case_rounds: int) -> int:
        """Timed rounds of ``reader`` on a case whose catalogue entry asks for ``case_rounds``."""
        rounds = self.rounds if self.rounds is not None else case_rounds
        if reader == BASELINE and self.baseline_rounds is not None:
            return self.baseline_rounds
        if reader in PEERS and self.peer_rounds is not None:
            return self.peer_rounds
        return rounds

    def readers_for(self, case_name: str) -> tuple[str, ...]:
        """The readers that load the case ``case_name`` (the baseline only where
        ``baseline_cases`` matches), in ``readers`` order."""
        if not self.baseline_cases:
            return self.readers
        keep = any(fnmatch.fnmatchcase(case_name, p) for p in self.baseline_cases)
        return tuple(r for r in self.readers if r != BASELINE or keep)

    def save_rounds_for(self, case_rounds: int, writer: str | None = None) -> int:
        """Timed saves of ``writer`` (None: any non-reference writer) on a case whose catalogue
        entry asks for ``case_rounds``."""
        if writer in REFERENCES and self.reference_rounds is not None:
            return self.reference_rounds
        if self.save_rounds is not None:
            return self.save_rounds
        return self.rounds if self.rounds is not None else case_rounds

    def saves_case(self, case_name: str) -> bool:
        """Whether the save phase runs on the (load) case ``case_name``."""
        if not self.writers:
            return False
        return not self.save_cases or any(
            fnmatch.fnmatchcase(case_name, pattern) for pattern in self.save_cases
        )

    def selected_cases(self) -> list[Case]:
        """The cases this run loads, in catalogue order (the one place a run selects them),
        named for the run's bucket type (read from the bucket's metadata when there is one).

        Raises:
          CaseError: an invalid catalogue, axis or override, or a ``cases`` glob that matches
            nothing (see ``cases.selection.select_run_cases``).
          FileNotFoundError or gcsckpt.io.ObjectStoreError: the bucket's metadata is unreadable.
        """
        return select_run_cases(
            self.catalogue,
            patterns=self.cases,
            axes=self.sweep_axes,
            model_scale=self.model_scale,
            world_size_override=self.world_size_override,
            bucket_type=run_bucket_type(self.bucket, self.endpoint),
        )
