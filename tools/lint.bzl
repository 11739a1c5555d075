"""lint_tests(): hygiene checks over the calling package's sources, as test targets."""

def _lint_test(name, tool, files, config):
    # One lint_check.py run of `tool` over `files`, with the tool's config file as data.
    if not files:
        return
    native.py_test(
        name = name,
        srcs = ["//tools:lint_check.py"],
        main = "//tools:lint_check.py",
        args = [tool] + ["$(location %s)" % f for f in files],
        data = files + [config],
        python_version = "PY3",
        size = "small",
    )

def lint_tests(py = True, cc = False):
    """Adds `ruff_test` (ruff check + format --check) and/or `clang_format_test` for this package.

    Args:
      py: check every *.py file of the package (recursively, up to sub-packages).
      cc: check every *.cc / *.h file of the package.
    """
    if py:
        _lint_test("ruff_test", "ruff", native.glob(["**/*.py"]), "//:ruff.toml")
    if cc:
        _lint_test("clang_format_test", "clang-format", native.glob(["**/*.cc", "**/*.h"]), "//:.clang-format")
