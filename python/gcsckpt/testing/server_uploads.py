"""The JSON API uploads of LocalGCS: media, multipart (multipart/related) and resumable.

Used by server_main.py for `POST|PUT|DELETE /upload/storage/v1/b/B/o...`. The body is a file
nginx already wrote (server_http.py): a media body is renamed into place, a multipart content
part and resumable chunks are copied in the kernel (copy_file_range); crc32c is read from the
file, a resumable session hashes each chunk as it arrives. MD5 is computed while answering
only when the request sends one to check (`md5Hash` in its metadata, `x-goog-hash: md5=..`),
else later (server_sums.LazyMD5); docs/design.md says why that is enough for every client
here. Answers as GCS: the object resource (200); a sent digest the bytes do not match 400;
`ifGenerationMatch` 412 (checked at session start and at commit). Resumable: 308 with
`Range: bytes=0-K`; a retried chunk's known prefix is skipped, one starting past the committed
offset is 400; the status query (`bytes */T`) answers the object once complete, also later;
DELETE cancels (499). Every answer waits out the latency model (server_http.Pacing).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import threading
import urllib.parse

import google_crc32c

from gcsckpt.testing.server_http import (
    JSON_TYPE,
    APIError,
    BadRequestBody,
    Pacing,
    body_file,
    goog_hashes,
    read_small_body,
    request_started,
    send,
    split_multipart,
)
from gcsckpt.testing.server_objects import (
    BucketNotFound,
    PreconditionFailed,
    as_api_error,
    check_object_name,
    object_resource,
)
from gcsckpt.testing.server_sums import HASHING_SLOTS, Checksums, copy_range, file_checksums

_RANGE = re.compile(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)")


@dataclasses.dataclass
class _Session:
    bucket: str
    name: str
    metadata: dict
    content_type: str
    if_generation_match: str | None
    path: str
    committed: int = 0
    crc: object = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class JSONUploads:
    """The JSON API upload handlers over one Store (server_store.py)."""

    def __init__(self, storage, pacing: Pacing | None = None, inline_md5=False) -> None:
        """`inline_md5`: every upload's MD5 is computed while answering (LocalGCS's
        md5_in_upload_answers), not only that of a request sending one."""
        self._storage = storage
        self._inline_md5 = inline_md5
        self._pacing = pacing or Pacing()
        self._sessions: dict[str, _Session] = {}
        self._completed: dict[str, dict] = {}  # upload_id -> the object it made
        self._lock = threading.Lock()
        self._dir = os.path.join(storage.uploads_dir, "resumable")
        os.makedirs(self._dir, exist_ok=True)

    def handle(self, handler, method: str, bucket: str, query: dict) -> None:
        """Answers one `/upload/storage/v1/b/{bucket}/o` request (query: parse_qs of the URL)."""
        started = request_started(handler)
        json_type = {"Content-Type": JSON_TYPE}
        try:
            status, obj, headers, nbytes = self._route(handler, method, bucket, query)
            body = json.dumps(obj).encode() if obj is not None else b""
            if obj is not None:
                headers = {**headers, **json_type}
        except (APIError, PreconditionFailed, BucketNotFound, BadRequestBody, ValueError) as err:
            error = as_api_error(err)
            status, body, headers, nbytes = error.status, error.body(), json_type, 0
        self._pacing.pace(started, nbytes)  # errors too: every answer takes the latency
        send(handler, status, body, headers)

    def _route(self, handler, method, bucket, query):
        upload_id = (query.get("upload_id") or [None])[0]
        if upload_id is not None:
            if method == "DELETE":
                return self._cancel(upload_id)
            return self._chunk(handler, upload_id)
        kind = (query.get("uploadType") or [""])[0]
        if method != "POST" or kind not in ("media", "multipart", "resumable"):
            raise APIError(400, "invalid", f"unsupported upload: {method} uploadType={kind!r}")
        if kind == "resumable":
            return self._start(handler, bucket, query)
        if kind == "multipart":
            return self._multipart(handler, bucket, query)
        return self._media(handler, bucket, query)

    # one-request uploads ---------------------------------------------------------------------

    @staticmethod
    def _sent_digests(handler, metadata: dict | None) -> list[tuple[str, str]]:
        """[(object resource field, base64 digest)] the request asks to be checked: `crc32c`
        and `md5Hash` in its object metadata, and its `x-goog-hash` labels."""
        fields = {"crc32c": "crc32c", "md5": "md5Hash"}
        sent = [(f, (metadata or {}).get(f)) for f in ("crc32c", "md5Hash")]
        sent += [(fields[label], v) for label, v in goog_hashes(handler.headers) if label in fields]
        return [(field, value) for field, value in sent if value]

    def _md5_now(self, sent: list[tuple[str, str]]) -> bool:
        return self._inline_md5 or any(field == "md5Hash" for field, _ in sent)

    def _new_object(self, handler, bucket, name, content_type, metadata, sums, sent) -> dict:
        have = {"crc32c": sums.crc32c, "md5Hash": sums.md5}
        for field, value in sent:
            if value != have[field]:
                raise APIError(
                    400,
                    "invalid",
                    f"Provided {field} {value!r} doesn't match the received "
                    f"bytes' {have[field]!r} (gs://{bucket}/{name})",
                )
        host = handler.headers.get("Host") or "127.0.0.1"
        return object_resource(host, bucket, name, content_type, metadata, sums)

    @staticmethod
    def _name(query: dict, metadata: dict | None) -> str:
        name = (query.get("name") or [None])[0] or (metadata or {}).get("name")
        if not name:
            raise APIError(400, "required", "Required parameter: name")
        try:
            check_object_name(name)  # refused before any byte is taken, as GCS does
        except ValueError as err:
            raise APIError(400, "invalid", str(err)) from None
        return name

    @staticmethod
    def _precondition(query: dict) -> str | None:
        return (query.get("ifGenerationMatch") or [None])[0]

    def _commit(self, handler, bucket, name, path, content_type, metadata, query):
        sent = self._sent_digests(handler, metadata)
        sums = file_checksums(path, md5=self._md5_now(sent))
        obj = self._new_object(handler, bucket, name, content_type, metadata, sums, sent)
        self._storage.commit_file(bucket, name, path, obj, self._precondition(query))
        return obj, sums.size

    def _media(self, handler, bucket, query):
        self._storage.require_bucket(bucket)
        name = self._name(query, None)
        path = body_file(handler, self._storage)
        try:
            content_type = handler.headers.get("Content-Type") or "application/octet-stream"
            obj, size = self._commit(handler, bucket, name, path, content_type, None, query)
        finally:
            if os.path.exists(path):
                os.unlink(path)
        return 200, obj, {}, size

    def _multipart(self, handler, bucket, query):
        self._storage.require_bucket(bucket)
        match = re.search(r'boundary="?([^";]+)"?', handler.headers.get("Content-Type") or "")
        if not match:
            raise APIError(400, "invalid", "multipart upload without a boundary")
        path = body_file(handler, self._storage)
        content = self._storage.new_temp_path()
        try:
            metadata, content_type, start, length = split_multipart(path, match.group(1))
            name = self._name(query, metadata)
            copy_range(path, content, 0, length, src_offset=start)
            obj, size = self._commit(handler, bucket, name, content, content_type, metadata, query)
        finally:
            for p in (path, content):
                if os.path.exists(p):
                    os.unlink(p)
        return 200, obj, {}, size

    # resumable uploads -------------------------------------------------------------------------

    def _start(self, handler, bucket, query):
        raw = read_small_body(handler, self._storage)
        try:
            metadata = json.loads(raw) if raw.strip() else {}
        except ValueError as err:
            raise APIError(400, "parseError", f"resumable metadata is not JSON: {err}") from err
        name = self._name(query, metadata)
        with self._storage.lock:
            self._storage.require_bucket(bucket)
            self._storage.check_precondition(bucket, name, self._precondition(query))
        upload_id = secrets.token_urlsafe(24)
        path = os.path.join(self._dir, upload_id)
        open(path, "wb").close()
        content_type = (
            handler.headers.get("X-Upload-Content-Type")
            or metadata.get("contentType")
            or "application/octet-stream"
        )
        session = _Session(
            bucket,
            name,
            metadata,
            content_type,
            self._precondition(query),
            path,
            crc=google_crc32c.Checksum(),
        )
        with self._lock:
            self._sessions[upload_id] = session
        host = handler.headers.get("Host") or "127.0.0.1"
        params = {k: v[0] for k, v in query.items() if k != "upload_id"}
        location = (
            f"http://{host}/upload/storage/v1/b/{urllib.parse.quote(bucket, safe='')}/o?"
            + urllib.parse.urlencode({**params, "upload_id": upload_id})
        )
        return 200, None, {"Location": location}, 0

    def _cancel(self, upload_id):
        with self._lock:
            session = self._sessions.pop(upload_id, None)
        if session is None:
            raise APIError(404, "notFound", f"No such upload session: {upload_id}")
        with session.lock:
            if os.path.exists(session.path):
                os.unlink(session.path)
        return 499, None, {}, 0

    def _chunk(self, handler, upload_id):
        with self._lock:
            session = self._sessions.get(upload_id)
            done = self._completed.get(upload_id)
        if session is None:
            if done is not None:
                body_file_path = body_file(handler, self._storage)  # drain, then report it
                os.unlink(body_file_path)
                return 200, done, {}, 0
            raise APIError(404, "notFound", f"No such upload session: {upload_id}")
        header = (handler.headers.get("Content-Range") or "").strip()
        match = _RANGE.fullmatch(header) if header else None
        if header and match is None:
            raise APIError(400, "invalid", f"bad Content-Range {header!r}")
        path = body_file(handler, self._storage)
        try:
            with session.lock:
                if self._sessions.get(upload_id) is not session:
                    with self._lock:
                        done = self._completed.get(upload_id)
                    if done is None:
                        raise APIError(404, "notFound", f"No such upload session: {upload_id}")
                    return 200, done, {}, 0
                size = os.path.getsize(path)
                if match is None:  # the whole object in one request
                    first, total = 0, size
                elif match.group(1) is None:  # bytes */T: the status query
                    first, total = session.committed, _total(match.group(3))
                    if size:
                        raise APIError(400, "invalid", "a status query carries no body")
                else:
                    first, last = int(match.group(1)), int(match.group(2))
                    total = _total(match.group(3))
                    if last - first + 1 != size:
                        raise APIError(
                            400,
                            "invalid",
                            f"Content-Range {header!r} declares "
                            f"{last - first + 1} bytes, the body has {size}",
                        )
                if first > session.committed:
                    raise APIError(
                        400,
                        "invalid",
                        f"chunk starts at byte {first}, but only "
                        f"{session.committed} bytes of gs://{session.bucket}/{session.name} are "
                        "committed; query the session and resume from there",
                    )
                skip = session.committed - first
                if size > skip:
                    self._append(session, path, skip, size - skip)
                if total is not None and session.committed > total:
                    raise APIError(
                        400,
                        "invalid",
                        f"{session.committed} bytes committed, more than the "
                        f"declared total {total}",
                    )
                if total is not None and session.committed == total:
                    obj = self._finish(handler, upload_id, session)
                    return 200, obj, {}, size
                headers = {}
                if session.committed:
                    headers["Range"] = f"bytes=0-{session.committed - 1}"
                return 308, None, headers, size
        finally:
            if os.path.exists(path):
                os.unlink(path)

    def _append(self, session: _Session, path: str, offset: int, length: int) -> None:
        sums_chunk = 8 << 20
        with HASHING_SLOTS, open(path, "rb", buffering=0) as f:
            f.seek(offset)
            left = length
            while left:
                data = f.read(min(left, sums_chunk))
                if not data:
                    raise BadRequestBody(f"body file ended {left} bytes early")
                session.crc.update(data)
                left -= len(data)
        if session.committed == 0 and offset == 0:
            os.replace(path, session.path)  # the first chunk becomes the session's file
        else:
            copy_range(path, session.path, session.committed, length, src_offset=offset)
        session.committed += length

    def _finish(self, handler, upload_id: str, session: _Session) -> dict:
        meta = {k: v for k, v in session.metadata.items() if k != "name"}
        sent = self._sent_digests(handler, meta)
        try:
            if self._md5_now(sent):  # one more read of the whole object
                sums = file_checksums(session.path, md5=True)
            else:
                sums = Checksums.of(session.committed, session.crc.digest())
            obj = self._new_object(
                handler, session.bucket, session.name, session.content_type, meta, sums, sent
            )
            self._storage.commit_file(
                session.bucket, session.name, session.path, obj, session.if_generation_match
            )
        except BaseException:
            with self._lock:  # a failed check or commit ends the session (as GCS)
                self._sessions.pop(upload_id, None)
            if os.path.exists(session.path):  # a failed check: the commit did not take it
                os.unlink(session.path)
            raise
        with self._lock:
            self._sessions.pop(upload_id, None)
            self._completed[upload_id] = obj
        return obj


def _total(text: str) -> int | None:
    return None if text == "*" else int(text)
