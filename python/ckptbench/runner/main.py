"""The benchmark program: parse flags, list or run the cases, exit 1 if any case failed.

Single machine: ``bazel run //bench:checkpoint_load -- --cases=...`` (ranks are spawned here).
Many machines: start the same program with ``torchrun`` on every node and give ``--bucket``;
every process then runs its rank's part of each job (``env://`` rendezvous) and rank 0 publishes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from absl import app

from ckptbench.cases.catalogue import CaseError
from ckptbench.harness.launch import TorchrunLauncher, init_from_env
from ckptbench.runner.benchmark import run_benchmark
from ckptbench.runner.flags import FLAGS, config_from_flags


def under_torchrun() -> bool:
    """True when torchrun (or another env:// launcher) started this process."""
    return "TORCHELASTIC_RUN_ID" in os.environ or {"RANK", "WORLD_SIZE"} <= set(os.environ)


def main(argv: Sequence[str]) -> int:
    """absl main: returns the exit code (0: every case ok; 1: some case failed).

    Raises:
      absl.app.UsageError: stray arguments, bad flag values, unknown cases or axes, or
        torchrun without ``--bucket``.
    """
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {list(argv[1:])}; every option is a --flag")
    config = config_from_flags()
    try:
        cases = config.selected_cases()
    except CaseError as err:
        raise app.UsageError(str(err)) from err
    if config.list_only:
        print("\n".join(case.name for case in cases))
        return 0
    launcher = None
    if under_torchrun():
        if config.bucket is None:
            raise app.UsageError("under torchrun, give --bucket=gs://... (shared by every node)")
        init_from_env(config.device, config.job_timeout_s)
        launcher = TorchrunLauncher()
    outcome = run_benchmark(config, launcher=launcher, cases=cases)
    return 1 if outcome.failures else 0


def run(defaults: Mapping[str, Any] | None = None) -> None:
    """Parses the command line (after applying ``defaults`` to the flags) and runs ``main``."""
    for name, value in (defaults or {}).items():
        FLAGS.set_default(name, value)
    app.run(main)
