"""The benchmark's command line: --list, and usage errors for bad flags (exit code 1)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from absl import app

from ckptbench.runner.flags import FLAGS, config_from_flags
from ckptbench.runner.main import main

PROGRAM = os.path.join("bench", "checkpoint_load.py")
OLMOE_EP = os.path.join("bench", "olmoe_ep.py")


def _program(*args: str, script: str = PROGRAM) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture
def parse():
    """Parses flags for an in-process main() call and resets them afterwards."""

    def _parse(*args: str) -> None:
        FLAGS.unparse_flags()
        FLAGS(["prog", *args])

    yield _parse
    FLAGS.unparse_flags()


def test_list_prints_the_selected_cases(capsys, parse):
    parse("--list", "--cases=load-olmoe*", "--sweep_axes=model strategy", "--world_size_override=4")
    assert main(["prog"]) == 0
    assert capsys.readouterr().out.split() == [
        "load-olmoe_1b_7b_0924-fsdp-ws4-local",
        "load-olmoe_1b_7b_0924-ep-dp4ep4-ws4-local",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--readers=gcsckpt,s3"], "--readers"),
        (["--rounds=0"], "--rounds must be >= 1"),
        (["--stream_mbps=-5"], "--stream_mbps"),
        (["--cases=load-nothing*"], "matches no case"),
        (["--sweep_axes=colour"], "unknown sweep axes"),
        (["--world_size_override=3"], "world size 3"),
        (["--bucket=s3://x", "--list"], "gs://bucket"),
    ],
)
def test_bad_values_are_usage_errors_naming_the_flag(parse, args, message):
    parse(*args)
    with pytest.raises(app.UsageError, match=message):
        main(["prog"])


def test_old_case_names_still_select_with_a_deprecation_warning(capsys, parse):
    parse("--list", "--cases=load-llama_3_1_8b-pp_hsdp_tp-pp2dpr2dp2tp2-ws16")
    with pytest.warns(FutureWarning, match="old case names .* deprecated"):
        assert main(["prog"]) == 0
    assert capsys.readouterr().out.split() == [
        "load-llama_3_1_8b-pp-hsdp-tp-pp2dpr2dp2tp2-ws16-local"
    ]


def test_stray_arguments_are_a_usage_error(parse):
    parse()
    with pytest.raises(app.UsageError, match="unexpected arguments"):
        main(["prog", "olmoe"])


def test_program_exits_1_with_usage_on_bad_flags():
    # A value the flag parser refuses and one RunConfig refuses, in one program start.
    done = _program("--model_scale=huge")
    assert done.returncode == 1
    assert "model_scale" in done.stderr and "huge" in done.stderr
    done = _program("--readers=fsspec,fsspec")
    assert done.returncode == 1
    assert "--readers" in done.stderr and "Any cases of the catalogue" in done.stderr


def test_olmoe_ep_defaults_select_the_pair():
    done = _program("--list", script=OLMOE_EP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "load-olmoe_1b_7b_0924-fsdp-ws8-local",
        "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-local",
    ]


def test_olmoe_ep_defaults_save_with_the_localfs_reference_once(parse):
    spec = importlib.util.spec_from_file_location("olmoe_ep_defaults", OLMOE_EP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines OLMOE_EP_DEFAULTS; main() runs only as a program
    defaults = module.OLMOE_EP_DEFAULTS
    assert defaults["writers"] == ["gcsckpt", "msc", "dataflux", "localfs"]
    assert (defaults["save_rounds"], defaults["reference_rounds"]) == (1, 1)
    parse(
        f"--writers={','.join(defaults['writers'])}",
        f"--save_rounds={defaults['save_rounds']}",
        f"--reference_rounds={defaults['reference_rounds']}",
    )
    config = config_from_flags()
    assert config.writers == ("gcsckpt", "msc", "dataflux", "localfs")
    assert [config.save_rounds_for(3, w) for w in config.writers] == [1, 1, 1, 1]


def test_olmoe_ep_defaults_train_ep_with_every_arm_but_stock(parse):
    spec = importlib.util.spec_from_file_location("olmoe_ep_defaults", OLMOE_EP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parse(f"--train_layouts={','.join(module.OLMOE_EP_DEFAULTS['train_layouts'])}")
    train = config_from_flags().train
    assert (train.layouts, train.ranks, train.rounds, train.scale) == (("ep",), 2, 1, "small")
    assert train.run_arms[0] == "none" and "fsspec-sync" in train.run_arms  # every arm
    assert len(train.run_arms) == 10
    parse()
    assert config_from_flags().train is None  # //bench:checkpoint_load: no training phase
    parse("--train_layouts=ep", "--train_arms=gcsckpt-turbo")
    with pytest.raises(app.UsageError, match="gcsckpt-turbo"):
        config_from_flags()
