"""Case names, validation, the shipped catalogue, axis selection and the scale switch."""

import dataclasses
import os
import subprocess
import sys

import pytest
import yaml

from ckptbench.cases.catalogue import (
    BUCKET_TYPES,
    CATALOGUE_PATH,
    Case,
    CaseError,
    load_catalogue,
    parse_catalogue,
    select_cases,
    validate_case,
    with_model_scale,
)

NAMES = [
    "load-llama_3_1_8b-fsdp-ws8",
    "load-llama_3_1_8b-hsdp-dpr2dp4-ws8",
    "load-llama_3_1_8b-hsdp-dpr4dp2-ws8",
    "load-llama_3_1_8b-tp-tp8-ws8",
    "load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8",
    "load-llama_3_1_8b-hsdp-tp-dpr2dp2tp2-ws8",
    "load-llama_3_1_8b-pp-pp8-ws8",
    "load-llama_3_1_8b-pp-fsdp-pp2dp4-ws8",
    "load-llama_3_1_8b-pp-fsdp-tp-pp2dp2tp2-ws8",
    "load-llama_3_1_8b-pp-hsdp-tp-pp2dpr2dp2tp2-ws16",
    "load-olmoe_1b_7b_0924-fsdp-ws8",
    "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8",
    "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-from-fsdp-ws8",
    "load-olmoe_1b_7b_0924-fsdp-ws8-from-ep-dp8ep8-ws8",
    "load-olmoe_1b_7b_0924-fsdp-ws4-from-fsdp-ws8",
    "load-olmoe_1b_7b_0924-fsdp-ws8-from-tp-tp8-ws8",
]


def test_shipped_catalogue_has_the_twelve_cases_and_four_resharded_loads():
    catalogue = load_catalogue()
    assert [c.name for c in catalogue.cases] == NAMES
    assert catalogue.baseline.name == "load-llama_3_1_8b-fsdp-ws8"
    assert catalogue.max_world_size == 16
    axes = {c.name: c.axis for c in catalogue.cases}
    assert axes["load-olmoe_1b_7b_0924-fsdp-ws8"] == "model"
    assert axes["load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"] == "strategy"
    assert sum(a == "strategy" for a in axes.values()) == 10
    ep = catalogue.get("load-olmoe_1b_7b_0924-ep-dp8ep8-ws8")
    assert (ep.data_parallel_size, ep.expert_parallel_size, ep.rounds) == (8, 8, 3)


def test_cases_module_imports_no_torch():
    code = (
        "import sys, ckptbench.cases.catalogue, ckptbench.cases.selection; "
        "sys.exit('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


def test_name_tokens():
    case = Case("olmoe_1b_7b_0924:scaled", "ep", 8, data_parallel_size=8, expert_parallel_size=8)
    assert case.name == "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"
    zonal = dataclasses.replace(case, bucket_kind="zonal")
    assert zonal.name == "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-zonal"
    assert (
        Case("llama_3_1_8b", "fsdp", 4, data_parallel_size=4).name == "load-llama_3_1_8b-fsdp-ws4"
    )


def test_names_as_the_seed_writes_them():
    big = Case(
        "llama_3_1_8b",
        "pp_hsdp_tp",
        16,
        pipeline_parallel_size=2,
        data_parallel_replicate_size=2,
        data_parallel_size=2,
        tensor_parallel_size=2,
    )
    assert big.base_name == "load-llama_3_1_8b-pp-hsdp-tp-pp2dpr2dp2tp2-ws16"
    assert big.legacy_name == "load-llama_3_1_8b-pp_hsdp_tp-pp2dpr2dp2tp2-ws16"
    regional = dataclasses.replace(big, bucket_kind="reg")
    assert regional.name == "load-llama_3_1_8b-pp-hsdp-tp-pp2dpr2dp2tp2-ws16-reg"
    assert regional.base_name == big.base_name
    fsdp_tp = Case("llama_3_1_8b", "fsdp_tp", 8, data_parallel_size=2, tensor_parallel_size=4)
    assert dataclasses.replace(fsdp_tp, bucket_kind="local").name == (
        "load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8-local"
    )
    assert set(BUCKET_TYPES) == {"reg", "zon", "hns", "local"}


BASE = Case("llama_3_1_8b", "fsdp", 8, data_parallel_size=8)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"strategy": "zero3"}, "strategy 'zero3' is unknown"),
        ({"tensor_parallel_size": 2}, "tensor_parallel_size must be 1 for strategy 'fsdp'"),
        ({"strategy": "hsdp"}, "data_parallel_replicate_size must be > 1 for strategy 'hsdp'"),
        ({"world_size": 16}, "world_size 16 != data_parallel_size=8 = 8"),
        ({"expert_parallel_size": 8}, "expert_parallel_size must be 1 for strategy 'fsdp'"),
        ({"data_parallel_size": 0}, "data_parallel_size must be a positive integer"),
        ({"model": "gpt2"}, "model: model 'gpt2' is not shipped"),
        ({"model": "llama_3_1_8b:huge"}, "unknown scale 'huge'"),
        ({"rounds": 0}, "rounds must be a positive integer"),
        ({"axis": "size"}, "axis 'size' is unknown"),
        ({"bucket_kind": "Zonal!"}, "bucket_kind 'Zonal!' must match"),
        (
            {"world_size": 32, "data_parallel_size": 32},
            "world_size 32 exceeds the maximum 16",
        ),
        (
            {"strategy": "ep", "expert_parallel_size": 8},
            "strategy 'ep' needs an MoE model, llama_3_1_8b is dense",
        ),
        (
            {"model": "olmoe_1b_7b_0924", "strategy": "ep", "expert_parallel_size": 4},
            "expert_parallel_size 4 must equal data_parallel_size 8",
        ),
    ],
)
def test_validation_names_the_field(changes, message):
    with pytest.raises(CaseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_case(dataclasses.replace(BASE, **changes))


def test_validation_accepts_every_catalogue_case_and_single_rank():
    for case in load_catalogue().cases:
        assert validate_case(case) is case
    assert validate_case(Case("llama_3_1_8b", "tp", 1)).name == "load-llama_3_1_8b-tp-ws1"


def test_axis_selection_always_keeps_the_baseline():
    catalogue = load_catalogue()
    assert [c.name for c in catalogue.select(["model"])] == [NAMES[0], NAMES[10]]
    assert [c.name for c in catalogue.select(["baseline"])] == [NAMES[0]]
    assert [c.name for c in catalogue.select([])] == [NAMES[0]]
    assert len(catalogue.select(["model", "strategy"])) == 12
    assert len(catalogue.select(None)) == 16
    assert [c.name for c in catalogue.select(["reshard"])] == [NAMES[0], *NAMES[12:]]
    assert NAMES[0] in [c.name for c in select_cases(catalogue.cases, ["strategy"])]
    with pytest.raises(CaseError, match=r"unknown sweep axes \['size'\]"):
        catalogue.select(["strategy", "size"])
    with pytest.raises(CaseError, match="no case named 'load-x'"):
        catalogue.get("load-x")


def test_scale_switch_changes_models_not_names():
    scaled = load_catalogue(model_scale="scaled")
    assert [c.name for c in scaled.cases] == NAMES
    assert {c.model for c in scaled.cases} == {"llama_3_1_8b:scaled", "olmoe_1b_7b_0924:scaled"}
    tiny = with_model_scale(scaled.cases[0], "tiny")
    assert (
        tiny.model == "llama_3_1_8b:tiny" and with_model_scale(tiny, "full").model == "llama_3_1_8b"
    )
    with pytest.raises(CaseError, match="unknown model scale 'medium'"):
        load_catalogue(model_scale="medium")


def _raw():
    return yaml.safe_load(CATALOGUE_PATH.read_text())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(extra=1), r"unknown keys \['extra'\]"),
        (lambda d: d["cases"][3].update(gpus=8), r"cases\[3\]: unknown keys \['gpus'\]"),
        (lambda d: d["cases"].append(dict(d["cases"][1])), "duplicate case name"),
        (
            lambda d: d["cases"][1].update(name="load-wrong"),
            r"cases\[1\]: name 'load-wrong' does not match",
        ),
        (lambda d: d["cases"][1].update(axis="baseline"), "needs exactly one baseline case"),
        (lambda d: d["cases"][0].pop("world_size"), r"cases\[0\]: .*world_size"),
        (lambda d: d.update(max_world_size=8), "world_size 16 exceeds the maximum 8"),
        (lambda d: d.update(cases=[]), "cases must be a non-empty list"),
        (lambda d: d["defaults"].update(rounds=-1), "rounds must be a positive integer"),
    ],
)
def test_catalogue_errors(edit, message):
    data = _raw()
    edit(data)
    with pytest.raises(CaseError, match=message):
        parse_catalogue(data)


def test_unreadable_catalogue(tmp_path):
    with pytest.raises(CaseError, match="cannot read catalogue"):
        load_catalogue(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases: [\n")
    with pytest.raises(CaseError, match="cannot read catalogue"):
        load_catalogue(bad)


def test_parallel_dims_carry_the_case_sizes():
    ep = load_catalogue().get("load-olmoe_1b_7b_0924-ep-dp8ep8-ws8").parallel_dims
    assert (ep.strategy, ep.world_size, ep.dp_shard, ep.ep, ep.mesh_dim_names) == (
        "ep",
        8,
        8,
        8,
        ("dp_shard",),
    )
    big = load_catalogue().get("load-llama_3_1_8b-pp-hsdp-tp-pp2dpr2dp2tp2-ws16").parallel_dims
    assert (big.pp, big.dp_replicate, big.dp_shard, big.tp, big.mesh_shape) == (
        2,
        2,
        2,
        2,
        (2,) * 4,
    )


def test_resharded_loads_name_and_share_the_saving_layout():
    catalogue = load_catalogue()
    ep = catalogue.get("load-olmoe_1b_7b_0924-ep-dp8ep8-ws8-from-fsdp-ws8")
    assert ep.axis == "reshard" and ep.saved_layout == "fsdp-ws8"
    assert ep.saved_case.base_name == "load-olmoe_1b_7b_0924-fsdp-ws8"
    assert ep.saved_case.saved_from is None and ep.saved_case.model == ep.model
    assert (ep.saved_case.strategy, ep.saved_case.expert_parallel_size) == ("fsdp", 1)
    tp = catalogue.get("load-olmoe_1b_7b_0924-fsdp-ws8-from-tp-tp8-ws8")
    assert tp.saved_case.base_name == "load-olmoe_1b_7b_0924-tp-tp8-ws8"
    small = catalogue.get("load-olmoe_1b_7b_0924-fsdp-ws4-from-fsdp-ws8")
    assert (small.world_size, small.saved_case.world_size) == (4, 8)
    scaled = load_catalogue(model_scale="scaled").get(ep.name)
    assert scaled.saved_case.model == "olmoe_1b_7b_0924:scaled"
    plain = catalogue.get("load-olmoe_1b_7b_0924-fsdp-ws8")
    assert plain.saved_case is plain and plain.saved_layout is None


def _reshard_entry(**changes):
    entry = {
        "axis": "reshard",
        "model": "olmoe_1b_7b_0924",
        "strategy": "fsdp",
        "world_size": 4,
        "data_parallel_size": 4,
        "saved_from": {"strategy": "fsdp", "world_size": 8, "data_parallel_size": 8},
    }
    entry.update(changes)
    base = {"axis": "baseline", "model": "llama_3_1_8b", "strategy": "tp", "world_size": 1}
    return {"cases": [base, entry]}


def test_reshard_entries_are_checked():
    parsed = parse_catalogue(_reshard_entry())
    assert parsed.cases[1].name == "load-olmoe_1b_7b_0924-fsdp-ws4-from-fsdp-ws8"
    same = {"strategy": "fsdp", "world_size": 4, "data_parallel_size": 4}
    with pytest.raises(CaseError, match="saved_from is the case's own layout"):
        parse_catalogue(_reshard_entry(saved_from=same))
    with pytest.raises(CaseError, match="saved_from is set exactly on the reshard axis"):
        parse_catalogue(_reshard_entry(axis="strategy"))
    with pytest.raises(CaseError, match="saved_from is set exactly on the reshard axis"):
        parse_catalogue(_reshard_entry(saved_from=None))
    bad = {"strategy": "ep", "world_size": 8, "data_parallel_size": 8}
    with pytest.raises(CaseError, match="saved_from: .*expert_parallel_size"):
        parse_catalogue(_reshard_entry(saved_from=bad))
    with pytest.raises(CaseError, match="name .* does not match"):
        parse_catalogue(_reshard_entry(name="load-olmoe_1b_7b_0924-fsdp-ws4"))
