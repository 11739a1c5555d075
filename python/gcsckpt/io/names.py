"""GCS's naming rules for buckets and objects: the one check the gs:// parser
(`gcsckpt.dcp.paths`) and the local endpoint (`gcsckpt.testing.LocalGCS`) both apply.

Buckets (https://cloud.google.com/storage/docs/buckets#naming): 3-63 characters of lowercase
letters, digits, '-', '_' and '.', starting and ending with a letter or digit; a name with dots
may be up to 222 characters, each dot-separated component at most 63 (none empty); not an IPv4
address in dotted-decimal form; not starting with "goog" nor containing "google".
Objects (https://cloud.google.com/storage/docs/objects#naming): 1-1,024 bytes of UTF-8, no
carriage return or line feed.
"""

from __future__ import annotations

import re

BUCKET_NAME_MAX_CHARS = 63  # a name without dots; also each component of a dotted name
DOTTED_BUCKET_NAME_MAX_CHARS = 222
OBJECT_NAME_MAX_BYTES = 1024

_BUCKET_CHARS_RE = re.compile(r"^[a-z0-9._-]+$")
_IPV4_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


def bucket_name_problem(name: object) -> str | None:
    """What makes `name` an invalid GCS bucket name (one short phrase), or None when valid."""
    if not isinstance(name, str):
        return f"a bucket name is a str, not {type(name).__name__}"
    limit = DOTTED_BUCKET_NAME_MAX_CHARS if "." in name else BUCKET_NAME_MAX_CHARS
    if not 3 <= len(name) <= limit:
        return f"it has {len(name)} characters, not 3-{limit}"
    if not _BUCKET_CHARS_RE.match(name):
        return "only lowercase letters, digits, '-', '_' and '.' are allowed"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return "it must start and end with a letter or digit"
    for component in name.split("."):
        if not component or len(component) > BUCKET_NAME_MAX_CHARS:
            return f"each dot-separated part must have 1-{BUCKET_NAME_MAX_CHARS} characters"
    if _IPV4_RE.match(name):
        return "it must not be an IP address"
    if name.startswith("goog") or "google" in name:
        return "it must not start with 'goog' or contain 'google'"
    return None


def check_bucket_name(name: object) -> str:
    """Returns `name` if it is a valid GCS bucket name.

    Raises:
        ValueError: naming the bucket and the rule it breaks.
    """
    problem = bucket_name_problem(name)
    if problem is not None:
        raise ValueError(f"{name!r} is not a valid GCS bucket name: {problem}")
    return name  # type: ignore[return-value]


def object_name_problem(name: object) -> str | None:
    """What makes `name` an invalid GCS object name, or None when valid."""
    if not isinstance(name, str):
        return f"an object name is a str, not {type(name).__name__}"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if not 1 <= size <= OBJECT_NAME_MAX_BYTES:
        return f"it has {size} bytes of UTF-8, not 1-{OBJECT_NAME_MAX_BYTES}"
    if "\r" in name or "\n" in name:
        return "it must not contain a carriage return or line feed"
    return None


def check_object_name(name: object) -> str:
    """Returns `name` if it is a valid GCS object name.

    Raises:
        ValueError: naming the object (cut short) and the rule it breaks.
    """
    problem = object_name_problem(name)
    if problem is not None:
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise ValueError(f"{shown} is not a valid GCS object name: {problem}")
    return name  # type: ignore[return-value]
