"""RunConfig (runner.config): flag checks, rounds per reader and writer, which cases save;
and the rounds note the run prints from it (runner.notes.rounds_note)."""

from __future__ import annotations

import pytest

from ckptbench.cases.catalogue import load_catalogue
from ckptbench.runner.config import RunConfig
from ckptbench.runner.notes import rounds_note

FSDP = "load-olmoe_1b_7b_0924-fsdp-ws8"

EP = "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"


def _case(name: str):
    return load_catalogue(model_scale="tiny").get(name)


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"readers": ("gcsckpt", "s3")}, "--readers"),
        ({"readers": ()}, "--readers"),
        ({"rounds": 0}, "--rounds"),
        ({"model_scale": "huge"}, "--model_scale"),
        ({"device": "tpu"}, "--device"),
        ({"latency_ms": -1.0}, "--latency_ms"),
        ({"stream_mbps": 0.0}, "--stream_mbps"),
        ({"writers": ("gcsckpt", "lightning")}, "--writers"),
        ({"writers": ("msc", "msc")}, "--writers"),
        ({"save_rounds": 0}, "--save_rounds"),
        ({"reference_rounds": 0}, "--reference_rounds"),
    ],
)
def test_run_config_rejects_bad_values_naming_the_flag(changes, flag):
    with pytest.raises(ValueError, match=flag):
        RunConfig(**changes)


def test_baseline_rounds_apply_to_fsspec_only():
    config = RunConfig(rounds=3, baseline_rounds=1)
    assert config.rounds_for("gcsckpt", 5) == 3
    assert config.rounds_for("fsspec", 5) == 1
    assert RunConfig().rounds_for("fsspec", 5) == 5


def test_save_phase_rounds_and_cases():
    config = RunConfig(rounds=3, writers=("gcsckpt", "msc"), save_cases=("load-*-ep-*",))
    assert config.save_rounds_for(5) == 3
    assert RunConfig(rounds=3, save_rounds=1).save_rounds_for(5) == 1
    assert RunConfig().save_rounds_for(5) == 5
    assert config.saves_case("load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-local")
    assert not config.saves_case("load-olmoe_1b_7b_0924-fsdp-ws8-local")
    assert not RunConfig().saves_case("load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-local")  # no writers
    assert RunConfig(writers=("fsspec",)).saves_case("anything")


def test_baseline_cases_and_peer_rounds_shape_each_readers_rounds():
    config = RunConfig(
        readers=("gcsckpt", "msc", "dataflux", "fsspec"),
        rounds=3,
        peer_rounds=2,
        baseline_rounds=1,
        baseline_cases=("load-*-ep-*",),
    )
    assert [config.rounds_for(r, 5) for r in config.readers] == [3, 2, 2, 1]
    assert config.readers_for(EP) == ("gcsckpt", "msc", "dataflux", "fsspec")
    assert config.readers_for(FSDP) == ("gcsckpt", "msc", "dataflux")
    assert RunConfig().readers_for(FSDP) == ("gcsckpt", "fsspec")  # default: every case
    cases = [_case(FSDP), _case(EP)]
    assert rounds_note(config, cases).startswith(
        "Timed rounds per case: gcsckpt 3, msc 2, dataflux 2, fsspec 1 on 1 of 2 cases."
    )
    with pytest.raises(ValueError, match="--peer_rounds must be >= 1"):
        RunConfig(peer_rounds=0)


def test_upload_ceiling_rounds_default_to_three_and_zero_turns_it_off():
    assert RunConfig().upload_ceiling_rounds == 3
    assert RunConfig(upload_ceiling_rounds=0).upload_ceiling_rounds == 0
    with pytest.raises(ValueError, match="--upload_ceiling_rounds must be >= 0, got -1"):
        RunConfig(upload_ceiling_rounds=-1)


def test_the_localfs_reference_has_rounds_of_its_own():
    config = RunConfig(rounds=3, save_rounds=1, reference_rounds=2, writers=("gcsckpt", "localfs"))
    assert config.save_rounds_for(5, "gcsckpt") == 1
    assert config.save_rounds_for(5, "localfs") == 2
    assert config.save_rounds_for(5) == 1
    assert RunConfig(save_rounds=1).save_rounds_for(5, "localfs") == 1  # default: save_rounds
    note = rounds_note(config, [_case(EP)])
    assert "Timed saves per writer: gcsckpt 1, localfs 2 on 1 case(s)" in note
