"""py_pytest: a py_test that runs pytest over its test files."""

def py_pytest(name, srcs, deps = [], data = [], args = [], **kwargs):
    """Declares a py_test running pytest on `srcs`.

    Args:
      name: target name.
      srcs: the test files (test_*.py) plus any helper modules they import.
      deps: py_library deps (e.g. "//python:dcp").
      data: runtime files.
      args: extra pytest arguments.
      **kwargs: passed to py_test (size, tags, shard_count, timeout, env ...).
    """
    native.py_test(
        name = name,
        srcs = srcs + ["//tools:pytest_runner.py"],
        main = "//tools:pytest_runner.py",
        args = ["$(location %s)" % s for s in srcs if s.split("/")[-1].startswith("test_")] + args,
        deps = deps,
        data = data,
        python_version = "PY3",
        **kwargs
    )
