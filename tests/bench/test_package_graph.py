"""The arrows under ``python/``: no module of the benchmark or of the library imports itself
through others, the benchmark's sub-packages import each other without a cycle (deferred imports
inside functions count), and the library ``gcsckpt`` never imports the benchmark. Also: no two
modules of the benchmark share a base name (each module's name says what it is)."""

import graphlib

import ckptbench
import gcsckpt
from tests.import_graph import collapse, imported_modules, module_graph, package_modules

BENCH = ckptbench.__name__


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (modules in order, the first again at the end), or []."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        return list(err.args[1])
    return []


def test_no_module_imports_itself_through_others():
    for package in (ckptbench, gcsckpt):
        graph = module_graph(package, deferred=True)
        assert len(graph) > 40, package.__name__  # every module was read
        assert _cycle(graph) == [], package.__name__
    # The check finds a circle where there is one.
    assert _cycle({"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}})[0] in {"a.x", "a.y", "a.z"}


def test_sub_packages_import_each_other_without_a_cycle():
    graph = collapse(module_graph(ckptbench, deferred=True), depth=2)
    subs = {
        "cases",
        "ceiling",
        "harness",
        "publish",
        "range_read",
        "record",
        "resume",
        "roles",
        "runner",
        "train",
        "worker",
        "workloads",
    }
    assert {f"ckptbench.{s}" for s in subs} <= set(graph)
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError on a cycle
    # The result records sit below the rank side that fills them, the arm roles below both.
    assert order.index("ckptbench.roles") < order.index("ckptbench.record")
    assert order.index("ckptbench.record") < order.index("ckptbench.worker")
    assert order.index("ckptbench.worker") < order.index("ckptbench.runner")
    # The training benchmark builds on the rank side and sits below the runner (the main job's
    # training phase).
    assert order.index("ckptbench.worker") < order.index("ckptbench.train")
    assert order.index("ckptbench.train") < order.index("ckptbench.runner")
    # The workloads and the harness (job protocol, launchers, interleave) are leaves: they import
    # no other sub-package; every scenario runs its jobs through the harness.
    assert graph["ckptbench.workloads"] == set() and graph["ckptbench.harness"] == set()
    for scenario in ("runner", "train", "resume"):
        assert "ckptbench.harness" in graph[f"ckptbench.{scenario}"], scenario


def test_no_two_benchmark_modules_share_a_base_name():
    by_base: dict[str, list[str]] = {}
    for name, path in package_modules(ckptbench).items():
        if path.name != "__init__.py":
            by_base.setdefault(path.stem, []).append(name)
    assert len(by_base) > 40  # every module was read
    assert {base: names for base, names in by_base.items() if len(names) > 1} == {}


def test_the_library_never_imports_the_benchmark():
    found = {
        name: sorted(m for m in imported_modules(path, deferred=True) if m.split(".")[0] == BENCH)
        for name, path in package_modules(gcsckpt).items()
    }
    assert len(found) > 30  # io, dcp and testing modules were read
    assert {name: hits for name, hits in found.items() if hits} == {}
