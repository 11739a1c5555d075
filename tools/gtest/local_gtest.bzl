"""Repository rule: GoogleTest from Debian's libgtest-dev (headers and static libraries).

tools/bazel installs libgtest-dev like the other Debian packages; this rule only points Bazel at
the installed files, so Bazel downloads nothing. Targets: `@local_gtest//:gtest` and
`@local_gtest//:gtest_main` (the latter provides main()).
"""

_BUILD = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "gtest",
    srcs = ["lib/libgtest.a"],
    hdrs = glob(["include/gtest/**/*.h"]),
    includes = ["include"],
    linkopts = ["-pthread"],
)

cc_library(
    name = "gtest_main",
    srcs = ["lib/libgtest_main.a"],
    deps = [":gtest"],
)
"""

# Where Debian (multiarch) and other layouts put the static libraries.
_LIB_DIRS = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
]

_INCLUDE_DIRS = ["/usr/include", "/usr/local/include"]

def _find(repository_ctx, dirs, name):
    for d in dirs:
        if repository_ctx.path(d + "/" + name).exists:
            return d + "/" + name
    return None

def _local_gtest_impl(repository_ctx):
    include = _find(repository_ctx, _INCLUDE_DIRS, "gtest/gtest.h")
    gtest = _find(repository_ctx, _LIB_DIRS, "libgtest.a")
    gtest_main = _find(repository_ctx, _LIB_DIRS, "libgtest_main.a")
    if not (include and gtest and gtest_main):
        fail("GoogleTest not found (gtest/gtest.h, libgtest.a, libgtest_main.a): install Debian's " +
             "libgtest-dev (tools/bazel does so when run as root).")
    repository_ctx.symlink(include[:-len("/gtest.h")], "include/gtest")
    repository_ctx.symlink(gtest, "lib/libgtest.a")
    repository_ctx.symlink(gtest_main, "lib/libgtest_main.a")
    repository_ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % repository_ctx.name)
    repository_ctx.file("BUILD", _BUILD)

local_gtest = repository_rule(
    implementation = _local_gtest_impl,
    local = True,
)
