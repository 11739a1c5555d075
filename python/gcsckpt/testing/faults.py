"""Which fault to inject into which request: Fault (one rule) and FaultPlan (the rules + counts)."""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import json
import re
import threading
import urllib.parse

KINDS = ("status", "reset_mid_body", "stall", "short_body", "wrong_content_range")
KINDS += ("ignore_range", "ignore_generation")  # upstream asked without Range / generation=
KINDS += ("flip_byte",)  # one body byte inverted in transit

_OBJECT_PATH = re.compile(r"^/(?:download/|upload/)?storage/v1/b/[^/]+/o/(?P<object>[^?]+)")
# The object resource's "name" in a multipart upload's first part or a resumable upload's start.
_BODY_NAME = re.compile(rb'"name"\s*:\s*("(?:[^"\\]|\\.)*")')
_BODY_NAME_SCAN = 64 << 10  # the resource comes first; no need to scan a big body


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault rule for FaultProxy.

    Attributes:
      kind: "status" (answer `status` with a JSON error body, upstream not asked),
        "reset_mid_body" (TCP reset after `after_bytes` body bytes),
        "stall" (pause `stall_s` seconds after `after_bytes` body bytes, then send the rest),
        "short_body" (clean close after `after_bytes` body bytes, Content-Length unchanged),
        "wrong_content_range" (the right bytes under a Content-Range shifted by one byte;
        a 200 answer becomes a 206 with such a header),
        "ignore_range" (asks upstream without the Range header: a server that answers a
        ranged GET with 200 and the whole object),
        "ignore_generation" (asks upstream without `generation=`: a server that answers the
        live version whichever generation was asked),
        "flip_byte" (the body with its byte at `after_bytes` inverted, headers unchanged:
        corruption in transit that TCP's checksum missed).
      status: HTTP status for kind "status" (503, 429, 500, 404, 401, ...).
      count: inject into the first `count` requests this rule matches; None: every one.
      nth: inject only into the nth (1-based) request this rule matches (then `count` is unused).
      object_name: match only requests for this object (decoded name, from the URL path);
        None: any object.
      object_glob: match only objects whose name matches this fnmatch pattern (e.g.
        "ckpt/__0_*.distcp", for names a writer makes up); None: any object.
      media_only: match only media reads (GET/HEAD with alt=media); False: any request.
      stall_s: pause for kind "stall", seconds.
      after_bytes: body bytes sent before a mid-body fault; None: half the body.
      echo_headers: kind "status" quotes the request's headers (Authorization too) and its
        bare credential in its error body, as a careless server might.
      last_upload_request: match only the request that would finish a resumable upload (a
        PUT whose Content-Range ends at the object's last byte, "bytes a-b/(b+1)"; with
        media_only=False), as an endpoint that cannot commit an object fails it.
    """

    kind: str
    status: int = 503
    count: int | None = 1
    nth: int | None = None
    object_name: str | None = None
    object_glob: str | None = None
    media_only: bool = True
    stall_s: float = 2.0
    after_bytes: int | None = None
    echo_headers: bool = False
    last_upload_request: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Fault kind {self.kind!r} is not one of {KINDS}")
        if not 100 <= self.status <= 599:
            raise ValueError(f"Fault status {self.status} is not an HTTP status")
        if self.count is not None and self.count < 1:
            raise ValueError(f"Fault count must be >= 1 or None, got {self.count}")
        if self.nth is not None and self.nth < 1:
            raise ValueError(f"Fault nth is 1-based, got {self.nth}")
        if self.stall_s < 0:
            raise ValueError(f"Fault stall_s must be >= 0 seconds, got {self.stall_s}")
        if self.after_bytes is not None and self.after_bytes < 0:
            raise ValueError(f"Fault after_bytes must be >= 0, got {self.after_bytes}")

    def cut_at(self, body_length: int) -> int:
        """Body bytes to send before a mid-body fault strikes (never more than the body)."""
        want = body_length // 2 if self.after_bytes is None else self.after_bytes
        return min(want, body_length)


def object_of(path: str, body: bytes | None = None) -> str | None:
    """The decoded object name of a JSON API request, or None (listing, bucket calls): from the
    URL path, else the `name` query parameter (media uploads), else the object resource at the
    start of the body (multipart uploads, resumable upload starts)."""
    match = _OBJECT_PATH.match(path)
    if match:
        return urllib.parse.unquote(match.group("object"))
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    names = query.get("name")
    if names:
        return names[0]
    found = _BODY_NAME.search(body[:_BODY_NAME_SCAN]) if body else None
    return json.loads(found.group(1)) if found else None


def is_media_read(method: str, path: str) -> bool:
    """True for GET/HEAD requests with alt=media (object content, not metadata)."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    return method in ("GET", "HEAD") and query.get("alt") == ["media"]


def _finishes_upload(content_range: str | None) -> bool:
    """True for a resumable upload PUT's Content-Range that ends at the object's last byte."""
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", (content_range or "").strip())
    return match is not None and int(match[2]) + 1 == int(match[3])


class FaultPlan:
    """Thread-safe: decides per request which Fault (if any) applies and counts injections.

    Every rule counts each request its filters match; the first rule (in list order) whose
    count/nth says "inject" wins, and only that one is counted as injected.
    """

    def __init__(self, faults: list[Fault]) -> None:
        self._faults = list(faults)
        self._seen = [0] * len(self._faults)
        self._injected = [0] * len(self._faults)
        self._by_kind: collections.Counter[str] = collections.Counter()
        self._requests = 0
        self._log: list[tuple[str, str]] = []
        self._ranges: list[str | None] = []
        self._lock = threading.Lock()

    def choose(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        range_header: str | None = None,
        content_range: str | None = None,
    ) -> Fault | None:
        """Registers one request (with its body, Range and Content-Range headers, if any) and
        returns the fault to inject into it, or None."""
        media = is_media_read(method, path)
        finishing = method == "PUT" and _finishes_upload(content_range)
        name = object_of(path, body)
        with self._lock:
            self._requests += 1
            self._log.append((method, path))
            self._ranges.append(range_header)
            chosen = None
            for i, fault in enumerate(self._faults):
                if fault.media_only and not media:
                    continue
                if fault.last_upload_request and not finishing:
                    continue
                if fault.object_name is not None and fault.object_name != name:
                    continue
                if fault.object_glob is not None and (
                    name is None or not fnmatch.fnmatchcase(name, fault.object_glob)
                ):
                    continue
                self._seen[i] += 1
                if chosen is not None:
                    continue
                if fault.nth is not None:
                    due = self._seen[i] == fault.nth
                else:
                    due = fault.count is None or self._injected[i] < fault.count
                if due:
                    chosen = fault
                    self._injected[i] += 1
                    self._by_kind[fault.kind] += 1
            return chosen

    @property
    def counts(self) -> dict[str, int]:
        """Injections so far per kind (kinds never injected are 0)."""
        with self._lock:
            return {kind: self._by_kind[kind] for kind in KINDS}

    @property
    def injected_per_fault(self) -> list[int]:
        """Injections so far per rule, in the order the rules were given."""
        with self._lock:
            return list(self._injected)

    @property
    def requests(self) -> int:
        """Requests seen so far (with or without a fault)."""
        with self._lock:
            return self._requests

    @property
    def request_log(self) -> list[tuple[str, str]]:
        """(method, path with query) of every request seen so far, in arrival order."""
        with self._lock:
            return list(self._log)

    @property
    def request_ranges(self) -> list[str | None]:
        """The Range header (None: none) of every request seen so far, in arrival order."""
        with self._lock:
            return list(self._ranges)
