"""Reads a wheel for the tests: its files, METADATA requirements, and the imports of its modules.

`imports_by_module` walks every module's AST (top-level and function-level imports, as lazy
imports count too) and sorts each import into gcsckpt-internal, the extension, the standard
library, or a third-party distribution (the installed one whose RECORD holds the module's file).
"""

from __future__ import annotations

import ast
import email.parser
import hashlib
import importlib.metadata
import importlib.util
import os
import sys
import zipfile
from functools import cache

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def files(wheel: str) -> dict[str, str]:
    """{archive path: sha256 hex} of every file in the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: hashlib.sha256(archive.read(name)).hexdigest()
            for name in archive.namelist()
            if not name.endswith("/")
        }


def read(wheel: str, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(name)


def metadata(wheel: str, dist_info: str):
    """The parsed METADATA (an email.message.Message)."""
    return email.parser.Parser().parsestr(read(wheel, f"{dist_info}/METADATA").decode())


def requirements(meta) -> dict[str | None, dict[str, Requirement]]:
    """{extra or None: {canonical name: Requirement}} from Requires-Dist."""
    out: dict[str | None, dict[str, Requirement]] = {}
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        extra = None
        if req.marker is not None:
            # Markers are `extra == "name"` only; evaluate to find which.
            extras = [
                e for e in meta.get_all("Provides-Extra") or [] if req.marker.evaluate({"extra": e})
            ]
            assert len(extras) == 1, line
            extra = extras[0]
        out.setdefault(extra, {})[canonicalize_name(req.name)] = req
    return out


@cache
def _file_owners() -> dict[str, str]:
    """{real path of every installed .py/.so file: canonical distribution name}."""
    owners = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])  # parses METADATA: once per distribution
        for f in dist.files or []:
            if f.suffix in (".py", ".so"):
                owners[os.path.realpath(dist.locate_file(f))] = name
    return owners


def distribution_of(module: str) -> str:
    """The installed distribution providing `module` (the longest dotted prefix with a file)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:n]))
        except ImportError:  # a prefix that is a module, not a package
            spec = None
        if spec is not None and spec.origin and os.path.exists(spec.origin):
            owner = _file_owners().get(os.path.realpath(spec.origin))
            if owner:
                return owner
    raise LookupError(f"no installed distribution provides {module}")


def imported_modules(source: str) -> tuple[set[str], set[str]]:
    """(modules, maybe_modules) imported anywhere in `source`: `import a.b` and the `a` of
    `from a import b` are modules; `a.b` of the latter may be one (a submodule) or a name."""
    modules, maybe = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
            maybe.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules, maybe


def classify(module: str, extension: str) -> str:
    """'extension' (the dotted name `extension`), 'gcsckpt', 'stdlib' or 'third_party'."""
    top = module.split(".")[0]
    if module == extension:
        return "extension"
    if top == "gcsckpt":
        return "gcsckpt"
    if top in sys.stdlib_module_names:
        return "stdlib"
    return "third_party"
