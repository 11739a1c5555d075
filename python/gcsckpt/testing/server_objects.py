"""The local endpoint's object records: the store's errors (and their JSON API answers),
generation stamps (mtime and ETag, which nginx serves without asking Python), the JSON object
resource, and object names checked and mapped to paths on disk (a segment too long for the file
system is hashed). Pure functions shared by server_store.py (the tables), server_uploads.py /
server_xml.py (the upload handlers) and server_main.py (the request handlers).
"""

from __future__ import annotations

import datetime
import hashlib
import re
import urllib.parse

from gcsckpt.testing.server_http import LONG_SEGMENT_MARK, APIError


class PreconditionFailed(Exception):
    """An ifGenerationMatch does not hold; answered as HTTP 412."""


class NotFound(Exception):
    """The bucket or object does not exist; answered as HTTP 404."""


class BucketNotFound(NotFound):
    """The bucket does not exist; answered as HTTP 404."""


class Conflict(Exception):
    """The bucket exists already, or is not empty; answered as HTTP 409."""


def now_rfc3339(after_s: float = 0.0) -> str:
    """Now (plus `after_s` seconds) as GCS writes times: RFC 3339, UTC, microseconds."""
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=after_s)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def generation_mtime(generation: int) -> int:
    """The file mtime (s) whose hex digits spell `generation`'s decimal digits."""
    return int(str(generation), 16)


def generation_etag(generation: int | str, size: int) -> str:
    """The etag (unquoted) of an object whose MD5 its upload did not compute: nginx's own ETag
    of the generation's file (`<mtime hex>-<size hex>`), so JSON, XML and media answers agree."""
    return f"{generation}-{size:x}"


def selects_md5(query: dict) -> bool:
    """Whether an answer to a request with `query` (parse_qs) is to carry md5Hash: GCS's
    `fields` (partial response) selector, when given, names it, `*`, or whole listing `items`.
    gcsckpt's ObjectStore lists with `items(name,size,generation)`: no MD5 is computed then."""
    fields = ",".join(query.get("fields") or [])
    if not fields:
        return True
    return (
        "md5Hash" in fields or "*" in fields or re.search(r"\bitems\b(?!\s*\()", fields) is not None
    )


def object_resource(
    host: str, bucket: str, name: str, content_type: str, metadata: dict | None, sums
) -> dict:
    """The object resource (GCS JSON API fields) of a new version of gs://bucket/name before
    commit_file numbers it: `host` (the request's Host) for its links, `metadata` the client's
    fields (contentType, custom `metadata`, ...; None: none), `sums` its Checksums (md5Hash,
    and md5Hash as the etag, only when the upload computed it)."""
    now = now_rfc3339()
    quoted = urllib.parse.quote(name, safe="")
    obj = {
        "kind": "storage#object",
        "name": name,
        "bucket": bucket,
        "selfLink": f"http://{host}/storage/v1/b/{bucket}/o/{quoted}",
        "mediaLink": f"http://{host}/download/storage/v1/b/{bucket}/o/{quoted}",
        "metageneration": "1",
        "contentType": content_type,
        "storageClass": "STANDARD",
        "size": str(sums.size),
        "crc32c": sums.crc32c,
        "timeCreated": now,
        "updated": now,
        "timeStorageClassUpdated": now,
    }
    fields = (
        "contentEncoding",
        "contentDisposition",
        "contentLanguage",
        "cacheControl",
        "metadata",
    )
    obj.update({key: value for key, value in (metadata or {}).items() if key in fields and value})
    if sums.md5 is not None:
        obj.update(md5Hash=sums.md5, etag=sums.md5)
    return obj


# GCS object names: 1-1,024 bytes of UTF-8, no CR or LF (gcsckpt.io.names holds the same rule;
# the server never imports gcsckpt.io, whose package loads the C++ extension).
OBJECT_NAME_MAX_BYTES = 1024
# A file name holds at most 255 bytes (ext4, xfs, tmpfs): a longer name segment is stored as
# LONG_SEGMENT_MARK + its SHA-256 (hex), and so is a segment that starts with the mark, so two
# names never share a file. nginx cannot open such a name's path (ENAMETOOLONG), so media reads
# of names with a segment over 255 bytes are proxied here (nginx_config.py).
SEGMENT_MAX_BYTES = 255


def check_object_name(name: str) -> None:
    """Raises ValueError (answered 400, as GCS does) for a name GCS refuses."""
    size = len(name.encode("utf-8", "surrogatepass"))
    if not 1 <= size <= OBJECT_NAME_MAX_BYTES:
        raise ValueError(
            f"object name of {size} bytes: GCS names are 1-{OBJECT_NAME_MAX_BYTES} bytes of UTF-8"
        )
    if "\r" in name or "\n" in name:
        raise ValueError("object names must not contain a carriage return or line feed")


def _disk_segment(segment: str) -> str:
    if len(segment.encode()) <= SEGMENT_MAX_BYTES and not segment.startswith(LONG_SEGMENT_MARK):
        return segment
    return LONG_SEGMENT_MARK + hashlib.sha256(segment.encode()).hexdigest()


def relative_path(name: str) -> str:
    """The path of object `name` below its bucket folder: empty and "." segments dropped (as
    the kernel resolves the `a//b` nginx is asked for); a segment over 255 bytes (or starting
    with LONG_SEGMENT_MARK) becomes the mark and its SHA-256.

    Raises:
      ValueError: a name GCS refuses, a ".." segment, or nothing left.
    """
    check_object_name(name)
    parts = [p for p in name.split("/") if p and p != "."]
    if not parts or ".." in parts:
        raise ValueError(f"object name {name!r} cannot be stored on disk")
    return "/".join(_disk_segment(p) for p in parts)


def as_api_error(err: Exception) -> APIError:
    """The JSON API answer to an error of the store, of a request body or an APIError."""
    if isinstance(err, APIError):
        return err
    status, reason = {
        PreconditionFailed: (412, "conditionNotMet"),
        BucketNotFound: (404, "notFound"),
        NotFound: (404, "notFound"),
        Conflict: (409, "conflict"),
    }.get(type(err), (400, "invalid"))
    return APIError(status, reason, str(err))
