"""Repository rule: the Python toolchain and headers from the interpreter named by PYTHON_BIN_PATH.

tools/bazel passes `--repo_env=PYTHON_BIN_PATH=<venv>/bin/python`; every third-party package (torch,
gcsfs, pybind11, ...) lives in that venv, so Bazel itself downloads nothing.
"""

_BUILD = """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
    # Debian has no `python`; Bazel 4.2.3's launcher otherwise starts with `#!/usr/bin/env python`.
    stub_shebang = "#!/usr/bin/env python3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":py3_runtime",
)

toolchain(
    name = "python_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "pybind11_headers",
    hdrs = glob(["pybind11_include/**/*.h"]),
    includes = ["pybind11_include"],
    deps = [":python_headers"],
)
"""

_PROBE = """
import sys, sysconfig
import pybind11
print(sysconfig.get_paths()["include"])
print(pybind11.get_include())
print(sys.version.split()[0])
"""

_TAGS_PROBE = """
import sys, sysconfig
print("cp%d%d" % sys.version_info[:2])
print(sysconfig.get_platform().replace("-", "_").replace(".", "_"))
"""

def _local_python_impl(repository_ctx):
    interpreter = repository_ctx.os.environ.get("PYTHON_BIN_PATH", "")
    if not interpreter:
        fail("PYTHON_BIN_PATH is not set: run Bazel through tools/bazel, or pass " +
             "--repo_env=PYTHON_BIN_PATH=/path/to/venv/bin/python (a venv built from requirements.lock).")
    result = repository_ctx.execute([interpreter, "-c", _PROBE])
    if result.return_code != 0:
        fail("PYTHON_BIN_PATH=%s cannot import pybind11 (is it the project's venv?):\n%s" %
             (interpreter, result.stderr))
    python_include, pybind11_include, _version = result.stdout.strip().split("\n")

    # Where actions run the interpreter: the same path by default; a remote worker's path with
    # --repo_env=PYTHON_EXEC_PATH=... (it must be the same Python version, for the headers).
    exec_interpreter = repository_ctx.os.environ.get("PYTHON_EXEC_PATH", "") or interpreter
    repository_ctx.symlink(python_include, "python_include")
    repository_ctx.symlink(pybind11_include, "pybind11_include")
    repository_ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % repository_ctx.name)
    repository_ctx.file("BUILD", _BUILD.format(interpreter = exec_interpreter))

    # Wheel tags of this interpreter (e.g. cp311, linux_x86_64), for //:wheel's file name.
    tags = repository_ctx.execute([interpreter, "-c", _TAGS_PROBE])
    if tags.return_code != 0:
        fail("PYTHON_BIN_PATH=%s: cannot read its wheel tags:\n%s" % (interpreter, tags.stderr))
    python_tag, platform_tag = tags.stdout.strip().split("\n")
    repository_ctx.file("wheel_tags.bzl", 'PYTHON_TAG = "%s"\nPLATFORM_TAG = "%s"\n' % (
        python_tag,
        platform_tag,
    ))

local_python = repository_rule(
    implementation = _local_python_impl,
    environ = ["PYTHON_BIN_PATH", "PYTHON_EXEC_PATH"],
    local = True,
)
