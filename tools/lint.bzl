"""lint_tests(): hygiene checks over the calling package's sources, as test targets."""

def lint_tests(py = True, cc = False):
    """Adds `ruff_test` (ruff check + format --check) and/or `clang_format_test` for this package.

    Args:
      py: check every *.py file of the package (recursively, up to sub-packages).
      cc: check every *.cc / *.h file of the package.
    """
    if py:
        files = native.glob(["**/*.py"])
        if files:
            native.py_test(
                name = "ruff_test",
                srcs = ["//tools:lint_check.py"],
                main = "//tools:lint_check.py",
                args = ["ruff"] + ["$(location %s)" % f for f in files],
                data = files + ["//:ruff.toml"],
                python_version = "PY3",
                size = "small",
            )
    if cc:
        files = native.glob(["**/*.cc", "**/*.h"])
        if files:
            native.py_test(
                name = "clang_format_test",
                srcs = ["//tools:lint_check.py"],
                main = "//tools:lint_check.py",
                args = ["clang-format"] + ["$(location %s)" % f for f in files],
                data = files + ["//:.clang-format"],
                python_version = "PY3",
                size = "small",
            )
