"""gcsckpt_version: the package's `__version__` (python/gcsckpt/__init__.py) for the wheel rule.

The version has one source, the `__version__ = "X"` line of the package's `__init__.py`, which
`import gcsckpt` reports. Bazel needs it while loading BUILD files (the wheel's file name holds
it), so this repository rule reads that line and writes `@gcsckpt_version//:version.bzl` with
`VERSION`; Bazel runs it again when the file changes. build_wheel.py checks the staged
`__init__.py` against the version it is given, so a stale value cannot ship.
"""

_PREFIX = "__version__ = "

def _gcsckpt_version_impl(repository_ctx):
    text = repository_ctx.read(repository_ctx.path(repository_ctx.attr.package_init))
    lines = [line for line in text.splitlines() if line.startswith(_PREFIX)]
    if len(lines) != 1:
        fail("%s: want one `%s\"X\"` line, found %d" % (
            repository_ctx.attr.package_init,
            _PREFIX,
            len(lines),
        ))
    version = lines[0][len(_PREFIX):].strip().strip("\"'")
    repository_ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % repository_ctx.name)
    repository_ctx.file("BUILD", "")
    repository_ctx.file("version.bzl", 'VERSION = "%s"\n' % version)

gcsckpt_version = repository_rule(
    implementation = _gcsckpt_version_impl,
    attrs = {
        "package_init": attr.label(allow_single_file = True, mandatory = True),
    },
    doc = "Writes version.bzl with VERSION, read from the package's __version__ line.",
)
