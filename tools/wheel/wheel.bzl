"""gcsckpt_wheel: a binary wheel from Bazel outputs (the TensorStore / jaxlib model).

Bazel builds the pybind11 extension; this rule hands it and the Python sources of `libs` (and
their deps) to build_wheel.py, which stages a package tree and runs setuptools' bdist_wheel.
"""

load("@local_python//:wheel_tags.bzl", "PLATFORM_TAG", "PYTHON_TAG")

# What the wheel ships: python/gcsckpt/, all of it: the library (io, dcp, the command line; with
# the root package), the framework integrations (their frameworks behind extras) and the local
# endpoint (testing). The benchmark (`ckptbench`, outside that root) runs through Bazel. Shared
# with //tests/wheel, which checks the wheel holds exactly these sources.
WHEEL_LIBS = [
    "//python:cli",
    "//python:dcp",
    "//python:integrations",
    "//python:io",
    "//python:testing",
]

def _gcsckpt_wheel_impl(ctx):
    name = "%s-%s-%s-%s-%s.whl" % (
        ctx.attr.distribution,
        ctx.attr.version,
        PYTHON_TAG,
        PYTHON_TAG,
        PLATFORM_TAG,
    )
    out = ctx.actions.declare_file("dist/" + name)
    sources = depset(transitive = [lib[PyInfo].transitive_sources for lib in ctx.attr.libs])
    runfiles = depset(transitive = [lib[DefaultInfo].default_runfiles.files for lib in ctx.attr.libs])

    # Package files: sources and data under the package root (the extension, which the libs
    # carry as data inside the package, comes separately: setuptools names its file).
    files = [
        f
        for f in depset(transitive = [sources, runfiles]).to_list()
        if f.short_path.startswith(ctx.attr.package_root + "/") and f != ctx.file.extension
    ]
    args = ctx.actions.args()
    args.use_param_file("@%s", use_always = True)
    args.set_param_file_format("multiline")
    args.add("--out", out)
    args.add("--distribution", ctx.attr.distribution)
    args.add("--version", ctx.attr.version)
    args.add("--summary", ctx.attr.summary)
    args.add("--python_tag", PYTHON_TAG)
    args.add("--platform_tag", PLATFORM_TAG)
    args.add("--package_root", ctx.attr.package_root)
    args.add("--extension", ctx.file.extension)
    args.add("--extension_module", ctx.attr.extension_module)
    args.add("--lock", ctx.file.lock)
    args.add("--readme", ctx.file.readme)
    for dist, policy in ctx.attr.requires.items():
        args.add("--requires", "%s:%s" % (dist, policy))
    for dist, extra in ctx.attr.extras.items():
        args.add("--extra", "%s:%s" % (dist, extra))
    for name, target in ctx.attr.scripts.items():
        args.add("--script", "%s:%s" % (name, target))
    args.add_all(files, before_each = "--file")
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = files + [ctx.file.extension, ctx.file.lock, ctx.file.readme],
        outputs = [out],
        mnemonic = "PyWheel",
        progress_message = "Packaging %s" % name,
        # Zip timestamps come from SOURCE_DATE_EPOCH: the same inputs give the same wheel bytes.
        env = {"SOURCE_DATE_EPOCH": "315532800"},
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

gcsckpt_wheel = rule(
    implementation = _gcsckpt_wheel_impl,
    doc = "A cpXY-cpXY-<platform> wheel at <package>/dist/ holding `libs` and one extension.",
    attrs = {
        "distribution": attr.string(mandatory = True, doc = "distribution name (gcsckpt)"),
        "version": attr.string(mandatory = True),
        "summary": attr.string(mandatory = True, doc = "one-line Summary metadata"),
        "scripts": attr.string_dict(doc = "console scripts: name -> module:function"),
        "libs": attr.label_list(providers = [PyInfo], doc = "py_library targets to ship"),
        "package_root": attr.string(default = "python", doc = "folder that holds the package"),
        "extension": attr.label(allow_single_file = [".so"], mandatory = True),
        "extension_module": attr.string(mandatory = True, doc = "its import name (gcsckpt._gcsio)"),
        "requires": attr.string_dict(
            doc = "runtime dependency -> range policy: 'minor' (>=pin,<next minor) or 'major'; " +
                  "the pin is the tested version in `lock`",
        ),
        "extras": attr.string_dict(
            doc = "dependency -> extra name, or 'extra:minor' / 'extra:major' for its range " +
                  "policy (default 'major')",
        ),
        "lock": attr.label(allow_single_file = True, mandatory = True),
        "readme": attr.label(
            allow_single_file = True,
            mandatory = True,
            doc = "the wheel's long description (Markdown)",
        ),
        "_builder": attr.label(
            default = "//tools/wheel:build_wheel",
            executable = True,
            cfg = "exec",
        ),
    },
)
