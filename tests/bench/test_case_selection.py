"""Which cases a run takes (cases.selection): world-size override, globs, axes, bucket type."""

from __future__ import annotations

import pytest

from ckptbench.cases.catalogue import CaseError, load_catalogue
from ckptbench.cases.selection import override_world_size, select_run_cases

FSDP = "load-olmoe_1b_7b_0924-fsdp-ws8"

EP = "load-olmoe_1b_7b_0924-ep-dp8ep8-ws8"


def _case(name: str):
    return load_catalogue(model_scale="tiny").get(name)


def test_override_world_size_moves_dp_shard_and_ep_together():
    ep = override_world_size(_case(EP), 4)
    assert (ep.name, ep.data_parallel_size, ep.expert_parallel_size) == (
        "load-olmoe_1b_7b_0924-ep-dp4ep4-ws4",
        4,
        4,
    )
    hsdp = override_world_size(_case("load-llama_3_1_8b-hsdp-dpr2dp4-ws8"), 4)
    assert (hsdp.data_parallel_replicate_size, hsdp.data_parallel_size) == (2, 2)
    tp = override_world_size(_case("load-llama_3_1_8b-tp-tp8-ws8"), 2)
    assert tp.name == "load-llama_3_1_8b-tp-tp2-ws2"
    single = override_world_size(_case(EP), 1)
    assert (single.name, single.data_parallel_size, single.expert_parallel_size) == (
        "load-olmoe_1b_7b_0924-ep-ws1",
        1,
        1,
    )


def test_override_world_size_names_the_case_it_cannot_resize():
    with pytest.raises(CaseError, match="hsdp-dpr4dp2-ws8"):
        override_world_size(_case("load-llama_3_1_8b-hsdp-dpr4dp2-ws8"), 4)


def test_select_run_cases_by_glob_and_axes():
    cases = select_run_cases(
        None,
        patterns=["load-olmoe*"],
        axes=["model", "strategy"],
        model_scale="tiny",
        world_size_override=2,
    )
    assert [c.name for c in cases] == [
        "load-olmoe_1b_7b_0924-fsdp-ws2",
        "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2",
    ]
    assert all(c.model == "olmoe_1b_7b_0924:tiny" for c in cases)
    with pytest.raises(CaseError, match="matches no case"):
        select_run_cases(None, patterns=["load-nothing*"], model_scale="tiny")


def test_selection_names_cases_for_the_bucket_type_and_takes_any_name_form():
    full = "load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8-zon"
    for pattern in (full, "load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8", "*-fsdp-tp-dp*-zon"):
        cases = select_run_cases(None, patterns=[pattern], model_scale="tiny", bucket_type="zon")
        assert [c.name for c in cases] == [full]
    with pytest.warns(FutureWarning, match="'load-llama_3_1_8b-fsdp_tp-dp2tp4-ws8' uses the old"):
        old = select_run_cases(
            None, patterns=["load-llama_3_1_8b-fsdp_tp-dp2tp4-ws8"], bucket_type="hns"
        )
    assert [c.name for c in old] == ["load-llama_3_1_8b-fsdp-tp-dp2tp4-ws8-hns"]
    with pytest.raises(CaseError, match="bucket type 'nearline' is unknown"):
        select_run_cases(None, bucket_type="nearline")


def test_a_resized_reshard_case_keeps_its_saving_layout():
    chosen = select_run_cases(
        None, patterns=["*-from-*"], axes=["reshard"], world_size_override=2, bucket_type="local"
    )
    assert [c.name for c in chosen] == [
        "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2-from-fsdp-ws8-local",
        "load-olmoe_1b_7b_0924-fsdp-ws2-from-ep-dp8ep8-ws8-local",
        "load-olmoe_1b_7b_0924-fsdp-ws2-from-fsdp-ws8-local",
        "load-olmoe_1b_7b_0924-fsdp-ws2-from-tp-tp8-ws8-local",
    ]
    assert {c.saved_case.world_size for c in chosen} == {8}
