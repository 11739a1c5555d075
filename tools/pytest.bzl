"""py_pytest: a py_test that runs pytest over its test files."""

# Tests that start servers on 127.0.0.1 (local GCS endpoint, fault proxy, bqemulator, gloo ranks):
# they run where Bazel runs, not on a remote worker (see README "Remote cache and remote
# execution").
LOCAL_SERVER_TAGS = ["requires-network", "no-remote-exec"]

def py_pytest(
        name,
        srcs,
        deps = [],
        data = [],
        args = [],
        local_servers = False,
        tags = [],
        legacy_create_init = False,
        **kwargs):
    """Declares a py_test running pytest on `srcs`.

    Args:
      name: target name.
      srcs: the test files (test_*.py) plus any helper modules they import.
      deps: py_library deps (e.g. "//python:dcp").
      data: runtime files.
      args: extra pytest arguments.
      local_servers: the test starts servers on loopback; adds LOCAL_SERVER_TAGS.
      tags: Bazel tags (e.g. "gpu").
      legacy_create_init: False (default): no generated __init__.py files, so pytest puts each
        test folder on sys.path and test helper modules import as in a plain pytest run.
      **kwargs: passed to py_test (size, tags, shard_count, timeout, env ...).
    """
    native.py_test(
        name = name,
        srcs = srcs + ["//tools:pytest_runner.py"],
        main = "//tools:pytest_runner.py",
        args = ["$(location %s)" % s for s in srcs if s.split("/")[-1].startswith("test_")] + args,
        deps = deps,
        data = data,
        tags = tags + (LOCAL_SERVER_TAGS if local_servers else []),
        legacy_create_init = legacy_create_init,
        python_version = "PY3",
        **kwargs
    )
