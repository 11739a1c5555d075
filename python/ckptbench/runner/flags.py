"""Command-line flags of the checkpoint-load benchmark (absl) and their RunConfig.

Defining happens at import (absl's way); ``bench/olmoe_ep.py`` changes some defaults before
parsing. ``config_from_flags`` turns the parsed values into a RunConfig and reports bad values as
``absl.app.UsageError`` (exit code 1 with the usage text).
"""

from __future__ import annotations

import os
import re

from absl import app, flags

from ckptbench.roles import READ_ONCE, READERS, UNVERIFIED, WRITERS
from ckptbench.runner.config import DEVICES, RunConfig
from ckptbench.runner.storage import DEFAULT_LOCAL_DIR
from ckptbench.workloads.models.configs import SCALES

FLAGS = flags.FLAGS

flags.DEFINE_bool("list", False, "Print the selected case names, one a line, and exit.")
flags.DEFINE_list(
    "cases", [], "Case names or shell globs (comma-separated); empty: all on the axes."
)
flags.DEFINE_string(
    "sweep_axes",
    None,
    "Catalogue axes to run, comma- or space-separated (strategy, model, reshard); the baseline "
    "case is always on them. Default: all.",
)
flags.DEFINE_string("catalogue", None, "Catalogue YAML file. Default: the shipped catalogue.")
flags.DEFINE_string(
    "bucket",
    None,
    "gs://bucket[/prefix] to run against (Application Default Credentials; an emulator when "
    "STORAGE_EMULATOR_HOST is set). Default: the embedded local GCS endpoint.",
)
flags.DEFINE_list(
    "readers",
    [r for r in READERS if r not in (UNVERIFIED, READ_ONCE)],
    f"Readers to run, in order ({', '.join(READERS)}; {UNVERIFIED}: gcsckpt with verify=False, "
    f"to measure what verification costs; {READ_ONCE}: gcsckpt with read_once=True, each byte "
    "range fetched once per job and sent to the ranks that share it).",
)
flags.DEFINE_list(
    "writers",
    [],
    f"Writers of the save phase, in order ({', '.join(WRITERS)}; localfs: torch's stock "
    "FileSystemWriter into local tmpfs, a reference for what dcp.save costs when storage is "
    "nearly free, never a peer); empty: no save phase.",
)
flags.DEFINE_integer(
    "save_rounds", None, "Timed saves per case and writer. Default: same as --rounds."
)
flags.DEFINE_integer(
    "reference_rounds",
    None,
    "Timed saves of the reference writer (localfs). Default: same as --save_rounds.",
)
flags.DEFINE_integer(
    "upload_ceiling_rounds",
    3,
    "Rounds of the endpoint's raw upload ceiling (parallel 64 MiB media uploads), measured "
    "after the save phase; 0: not measured. Emulator endpoints only.",
)
flags.DEFINE_integer(
    "download_ceiling_rounds",
    3,
    "Rounds of the endpoint's raw download ceiling (16 parallel 8 MiB ranged GETs of one "
    "256 MiB object), measured after the cases; 0: not measured. Emulator endpoints only.",
)
flags.DEFINE_list(
    "save_cases", [], "Case names or globs the save phase runs on. Default: every selected case."
)
flags.DEFINE_integer("rounds", None, "Timed rounds per case and reader. Default: the case's (3).")
flags.DEFINE_integer(
    "baseline_rounds", None, "Timed rounds of the fsspec baseline. Default: same as --rounds."
)
flags.DEFINE_list(
    "baseline_cases",
    [],
    "Case names or globs the fsspec baseline loads. Default: every selected case.",
)
flags.DEFINE_integer(
    "peer_rounds", None, "Timed rounds of the peer readers (msc, dataflux). Default: --rounds."
)
flags.DEFINE_integer("world_size_override", None, "Resize every case to this many ranks.")
flags.DEFINE_enum("model_scale", "scaled", list(SCALES), "Model size for every shipped model.")
flags.DEFINE_string(
    "output_dir", None, "Results folder. Default: ~/.cache/gcsckpt/results/<run id>."
)
flags.DEFINE_string(
    "bigquery_table", None, "project.dataset.table to insert one row per case and reader into."
)
flags.DEFINE_string(
    "bigquery_endpoint", None, "BigQuery REST endpoint instead of Google's (an emulator)."
)
flags.DEFINE_enum("device", "cpu", list(DEVICES), "cpu (gloo) or cuda (nccl, one rank per GPU).")
flags.DEFINE_float(
    "latency_ms", 0.0, "First-byte latency the local endpoint adds to media reads, ms."
)
flags.DEFINE_float("stream_mbps", None, "Per-stream bandwidth cap of the local endpoint, MB/s.")
flags.DEFINE_string("local_gcs_dir", DEFAULT_LOCAL_DIR, "Data folder of the local endpoint.")
flags.DEFINE_bool("force_setup", False, "Save checkpoints again even when matching ones exist.")
flags.DEFINE_float("job_timeout_s", 1800.0, "Wall-clock limit of one setup or load job, s.")
flags.DEFINE_list(
    "train_layouts",
    [],
    "Layouts of the training phase (ep, fsdp; //bench:train_ckpt's loop, small OLMoE on 2 "
    "ranks, after the cases); empty: no training phase.",
)
flags.DEFINE_list(
    "train_arms",
    [
        "none",
        "localfs",
        "gcsckpt-sync",
        "gcsckpt-thread",
        "gcsckpt-process",
        "msc-sync",
        "msc-async",
        "dataflux-sync",
        "dataflux-async",
        "fsspec-sync",
    ],
    "Arms of the training phase (every arm; fsspec-sync, the stock writer, is the slowest).",
)
flags.DEFINE_integer("train_steps", 8, "AdamW steps per round of the training phase.")
flags.DEFINE_integer("train_every", 4, "The training phase checkpoints after every N-th step.")
flags.DEFINE_integer("train_rounds", 1, "Rounds per arm of the training phase.")

_SPLIT = re.compile(r"[,\s]+")


def _split(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(part for part in _SPLIT.split(text.strip()) if part)


def config_from_flags() -> RunConfig:
    """The RunConfig of the parsed flags; the emulator endpoint comes from
    ``STORAGE_EMULATOR_HOST`` when ``--bucket`` is given.

    Raises:
      absl.app.UsageError: a flag value is invalid (the message names the flag).
    """
    endpoint = None
    if FLAGS.bucket:
        endpoint = os.environ.get("STORAGE_EMULATOR_HOST") or None
    if endpoint and not endpoint.startswith(("http://", "https://")):
        endpoint = f"http://{endpoint}"
    try:
        train = None
        if FLAGS.train_layouts:
            from ckptbench.train.run import TrainSettings

            train = TrainSettings(
                layouts=tuple(FLAGS.train_layouts),
                arms=tuple(FLAGS.train_arms),
                steps=FLAGS.train_steps,
                every=FLAGS.train_every,
                rounds=FLAGS.train_rounds,
            )
        return RunConfig(
            cases=tuple(FLAGS.cases),
            sweep_axes=_split(FLAGS.sweep_axes),
            catalogue=FLAGS.catalogue,
            bucket=FLAGS.bucket,
            endpoint=endpoint,
            readers=tuple(FLAGS.readers),
            writers=tuple(FLAGS.writers),
            save_rounds=FLAGS.save_rounds,
            reference_rounds=FLAGS.reference_rounds,
            save_cases=tuple(FLAGS.save_cases),
            rounds=FLAGS.rounds,
            baseline_rounds=FLAGS.baseline_rounds,
            baseline_cases=tuple(FLAGS.baseline_cases),
            peer_rounds=FLAGS.peer_rounds,
            upload_ceiling_rounds=FLAGS.upload_ceiling_rounds,
            download_ceiling_rounds=FLAGS.download_ceiling_rounds,
            world_size_override=FLAGS.world_size_override,
            model_scale=FLAGS.model_scale,
            output_dir=FLAGS.output_dir,
            bigquery_table=FLAGS.bigquery_table,
            bigquery_endpoint=FLAGS.bigquery_endpoint,
            device=FLAGS.device,
            latency_ms=FLAGS.latency_ms,
            stream_mbps=FLAGS.stream_mbps,
            local_gcs_dir=FLAGS.local_gcs_dir,
            force_setup=FLAGS.force_setup,
            job_timeout_s=FLAGS.job_timeout_s,
            list_only=FLAGS.list,
            train=train,
        )
    except ValueError as err:
        raise app.UsageError(str(err)) from err
