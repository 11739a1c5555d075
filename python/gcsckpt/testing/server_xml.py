"""The XML API uploads of LocalGCS: simple PUT and multipart upload (MPU); used by server_main.py.

Why: google-cloud-storage's `transfer_manager.upload_chunks_concurrently` (and the writers of
multi-storage-client and gcs-torch-dataflux on it) upload large objects with the XML MPU,
path style on the JSON API's host. As GCS documents it (xml-api/post-object-multipart):
`PUT /B/O` makes the object; `POST ?uploads` starts an upload (Content-Type, `x-goog-meta-*`
kept); `PUT ?partNumber=N&uploadId=U` stores a part; `GET ?uploadId=U` lists them; `POST
?uploadId=U` with CompleteMultipartUpload concatenates the listed parts in the kernel into one
new generation; `DELETE ?uploadId=U` drops them. `x-goog-if-generation-match` answers 412 (at
initiation and completion); errors as GCS (NoSuchUpload, InvalidPart, InvalidPartOrder,
EntityTooSmall, MalformedXML). ETags: the MD5 hex when the request sent an MD5 to check, else
`<generation>-<size hex>` for objects (nginx's ETag of that generation) and the opaque
`<crc32c hex>-<size hex>-<N>` for parts, which clients send back unread (they check only the
x-goog-hash label of their checksum, crc32c by default). Reads are nginx's, from disk.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import threading
import xml.etree.ElementTree as ET
from xml.sax.saxutils import escape

from gcsckpt.testing.server_http import (
    BadRequestBody,
    Pacing,
    body_file,
    goog_hashes,
    read_small_body,
    request_started,
    send,
)
from gcsckpt.testing.server_objects import BucketNotFound, PreconditionFailed, object_resource
from gcsckpt.testing.server_sums import Checksums, concatenate, file_checksums

S3_NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
MIN_PART_BYTES = 5 << 20  # every part but the last
MAX_PART_NUMBER = 10_000
# What the XML API keeps of an upload's headers as object metadata fields.
_HEADER_FIELDS = {
    "cache-control": "cacheControl",
    "content-disposition": "contentDisposition",
    "content-encoding": "contentEncoding",
    "content-language": "contentLanguage",
}


# GCS's Message for each error Code (what these answers use of its error table).
_MESSAGES = {
    "BadDigest": "The digest you specified did not match what we received.",
    "EntityTooSmall": "Your proposed upload is smaller than the minimum allowed object size.",
    "IncompleteBody": "The request body is incomplete.",
    "InvalidArgument": "Part number must be an integer between 1 and 10000, inclusive.",
    "InvalidPart": "One or more of the specified parts could not be found.",
    "InvalidPartOrder": "The list of parts was not in ascending order.",
    "MalformedXML": "The XML you provided was not well-formed.",
    "NoSuchBucket": "The specified bucket does not exist.",
    "NoSuchUpload": "The requested upload was not found.",
    "NotImplemented": "A header or query you provided implies functionality not implemented.",
    "PreconditionFailed": "At least one of the pre-conditions you specified did not hold.",
}


class XMLError(Exception):
    """One GCS XML API error answer: status, Code (a key of _MESSAGES), Details."""

    def __init__(self, status: int, code: str, details: str = "") -> None:
        super().__init__(f"{status} {code}: {_MESSAGES[code]} {details}")
        self.status, self.code, self.details = status, code, details

    def body(self) -> bytes:
        return (
            "<?xml version='1.0' encoding='UTF-8'?><Error>"
            f"<Code>{escape(self.code)}</Code><Message>{escape(_MESSAGES[self.code])}</Message>"
            f"<Details>{escape(self.details)}</Details></Error>"
        ).encode()


def _no_such_upload(upload_id: str) -> XMLError:
    return XMLError(404, "NoSuchUpload", f"No such upload: {upload_id}")


@dataclasses.dataclass
class _Part:
    path: str
    sums: Checksums
    etag: str  # without quotes


@dataclasses.dataclass
class _Session:
    bucket: str
    name: str
    folder: str
    content_type: str
    metadata: dict
    if_generation_match: str | None
    parts: dict[int, _Part] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


def _part_etag(sums: Checksums, number: int) -> str:
    """A part's ETag (unquoted): its MD5 when computed (as GCS), else an opaque token."""
    if sums.md5_hex is not None:
        return sums.md5_hex
    return f"{sums.crc32c_int:08x}-{sums.size:x}-{number}"


def _hash_header(sums: Checksums) -> str:
    return f"crc32c={sums.crc32c}" + (f",md5={sums.md5}" if sums.md5 is not None else "")


def _asks_md5(headers) -> bool:
    """Whether the request sends an MD5 to check (then it is computed while answering)."""
    return bool(headers.get("Content-MD5")) or any(
        label == "md5" for label, _ in goog_hashes(headers)
    )


def _object_metadata(headers) -> tuple[str, dict]:
    """(content type, object metadata fields) from XML request headers."""
    meta: dict = {}
    custom = {}
    for key, value in headers.items():
        low = key.lower()
        if low.startswith("x-goog-meta-"):
            custom[key[len("x-goog-meta-") :]] = value
        elif low in _HEADER_FIELDS:
            meta[_HEADER_FIELDS[low]] = value
    if custom:
        meta["metadata"] = custom
    return headers.get("Content-Type") or "application/octet-stream", meta


def _check_digests(headers, sums: Checksums) -> None:
    """Content-MD5 and x-goog-hash sent by the client must match the bytes received."""
    sent_md5 = headers.get("Content-MD5")
    if sent_md5 and sent_md5 != sums.md5:
        raise XMLError(400, "BadDigest", f"Content-MD5 {sent_md5}, received bytes have {sums.md5}")
    for label, value in goog_hashes(headers):
        have = {"crc32c": sums.crc32c, "md5": sums.md5}.get(label)
        if have is not None and value != have:
            raise XMLError(
                400, "BadDigest", f"x-goog-hash {label}={value}, received bytes have {have}"
            )


class XMLUploads:
    """The XML API upload handlers over one Store (server_store.py)."""

    def __init__(self, storage, pacing: Pacing | None = None, inline_md5=False) -> None:
        """`inline_md5`: every upload's MD5 is computed while answering (LocalGCS's
        md5_in_upload_answers): ETags and x-goog-hash as GCS's."""
        self._storage = storage
        self._inline_md5 = inline_md5
        self._pacing = pacing or Pacing()
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def handle(self, handler, method: str, bucket: str, name: str, query: dict) -> None:
        """Answers one XML API request for gs://bucket/name (query: parse_qs of the URL)."""
        handler.gcs_started = request_started(handler)  # per request (threads share self)
        try:
            self._route(handler, method, bucket, name, query)
        except (XMLError, PreconditionFailed, BucketNotFound, BadRequestBody) as err:
            if not isinstance(err, XMLError):
                status, code = {
                    PreconditionFailed: (412, "PreconditionFailed"),
                    BucketNotFound: (404, "NoSuchBucket"),
                    BadRequestBody: (400, "IncompleteBody"),
                }[type(err)]
                err = XMLError(status, code, str(err))
            self._answer(handler, err.status, err.body(), {"Content-Type": "application/xml"})

    def _answer(self, handler, status, body=b"", headers=None, nbytes: int = 0) -> None:
        """Sends one answer once the latency model allows (`nbytes`: body bytes received)."""
        self._pacing.pace(handler.gcs_started, nbytes)
        send(handler, status, body, headers)

    def _route(self, handler, method: str, bucket: str, name: str, query: dict) -> None:
        upload_id = (query.get("uploadId") or [None])[0]
        if method == "POST" and "uploads" in query:
            return self._initiate(handler, bucket, name)
        if method == "PUT" and upload_id is not None:
            return self._put_part(handler, bucket, name, upload_id, query)
        if method == "PUT":
            return self._put_object(handler, bucket, name)
        if method == "POST" and upload_id is not None:
            return self._complete(handler, bucket, name, upload_id)
        if method == "DELETE" and upload_id is not None:
            return self._abort(handler, bucket, name, upload_id)
        if method == "GET" and upload_id is not None:
            return self._list_parts(handler, bucket, name, upload_id)
        raise XMLError(501, "NotImplemented", f"{method} {handler.path}")

    # simple upload -----------------------------------------------------------------------------

    def _new_object(self, handler, bucket: str, name: str, content_type, meta, sums) -> dict:
        host = handler.headers.get("Host") or "127.0.0.1"
        return object_resource(host, bucket, name, content_type, meta, sums)

    def _object_headers(self, obj: dict, sums: Checksums) -> dict[str, str]:
        etag = sums.md5_hex if sums.md5_hex is not None else obj["etag"]
        return {
            "ETag": f'"{etag}"',
            "x-goog-generation": obj["generation"],
            "x-goog-metageneration": obj.get("metageneration", "1"),
            "x-goog-hash": _hash_header(sums),
            "x-goog-stored-content-length": str(sums.size),
        }

    def _put_object(self, handler, bucket: str, name: str) -> None:
        self._storage.require_bucket(bucket)
        path = body_file(handler, self._storage)
        try:
            sums = file_checksums(path, md5=self._inline_md5 or _asks_md5(handler.headers))
            _check_digests(handler.headers, sums)
            content_type, meta = _object_metadata(handler.headers)
            obj = self._new_object(handler, bucket, name, content_type, meta, sums)
            wanted = handler.headers.get("x-goog-if-generation-match")
            self._storage.commit_file(bucket, name, path, obj, wanted)
        finally:
            if os.path.exists(path):
                os.unlink(path)
        self._answer(handler, 200, b"", self._object_headers(obj, sums), sums.size)

    # multipart upload --------------------------------------------------------------------------

    def _session(self, bucket: str, name: str, upload_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get(upload_id)
        if session is None or (session.bucket, session.name) != (bucket, name):
            raise _no_such_upload(upload_id)
        return session

    def _initiate(self, handler, bucket: str, name: str) -> None:
        read_small_body(handler, self._storage)  # none expected; keeps the connection in step
        wanted = handler.headers.get("x-goog-if-generation-match")
        with self._storage.lock:
            self._storage.require_bucket(bucket)
            self._storage.check_precondition(bucket, name, wanted)
        content_type, meta = _object_metadata(handler.headers)
        upload_id = secrets.token_urlsafe(32)
        folder = os.path.join(self._storage.uploads_dir, "xml", upload_id)
        os.makedirs(folder)
        with self._lock:
            self._sessions[upload_id] = _Session(bucket, name, folder, content_type, meta, wanted)
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<InitiateMultipartUploadResult xmlns="{S3_NAMESPACE}">'
            f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(name)}</Key>"
            f"<UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>"
        ).encode()
        self._answer(handler, 200, body, {"Content-Type": "application/xml"})

    def _put_part(self, handler, bucket, name, upload_id, query) -> None:
        session = self._session(bucket, name, upload_id)
        raw = (query.get("partNumber") or [""])[0]
        if not re.fullmatch(r"[0-9]{1,5}", raw) or not 1 <= int(raw) <= MAX_PART_NUMBER:
            raise XMLError(400, "InvalidArgument", f"partNumber={raw!r}")
        number = int(raw)
        path = body_file(handler, self._storage)
        try:
            sums = file_checksums(path, md5=self._inline_md5 or _asks_md5(handler.headers))
            _check_digests(handler.headers, sums)
            etag = _part_etag(sums, number)
            with session.lock:
                if self._sessions.get(upload_id) is not session:
                    raise _no_such_upload(upload_id)
                dest = os.path.join(session.folder, str(number))
                os.replace(path, dest)
                session.parts[number] = _Part(dest, sums, etag)
        finally:
            if os.path.exists(path):
                os.unlink(path)
        headers = {"ETag": f'"{etag}"', "x-goog-hash": _hash_header(sums)}
        self._answer(handler, 200, b"", headers, sums.size)

    def _list_parts(self, handler, bucket, name, upload_id) -> None:
        session = self._session(bucket, name, upload_id)
        with session.lock:
            parts = sorted(session.parts.items())
        items = "".join(
            f'<Part><PartNumber>{n}</PartNumber><ETag>"{escape(p.etag)}"</ETag>'
            f"<Size>{p.sums.size}</Size></Part>"
            for n, p in parts
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<ListPartsResult xmlns="{S3_NAMESPACE}"><Bucket>{escape(bucket)}</Bucket>'
            f"<Key>{escape(name)}</Key><UploadId>{upload_id}</UploadId>"
            f"<IsTruncated>false</IsTruncated>{items}</ListPartsResult>"
        ).encode()
        self._answer(handler, 200, body, {"Content-Type": "application/xml"})

    @staticmethod
    def _parse_complete(doc: bytes) -> list[tuple[int, str]]:
        """[(part number, ETag without quotes)] of a CompleteMultipartUpload document."""
        try:
            root = ET.fromstring(doc)
        except ET.ParseError as err:
            raise XMLError(400, "MalformedXML", str(err)) from err
        local = lambda tag: tag.rsplit("}", 1)[-1]  # noqa: E731 (namespace optional)
        listed = []
        if local(root.tag) != "CompleteMultipartUpload":
            raise XMLError(400, "MalformedXML", f"root element {local(root.tag)!r}")
        for part in root:
            if local(part.tag) != "Part":
                continue
            fields = {local(child.tag): (child.text or "").strip() for child in part}
            if not re.fullmatch(r"[0-9]{1,5}", fields.get("PartNumber", "")):
                raise XMLError(400, "MalformedXML", f"PartNumber {fields.get('PartNumber')!r}")
            listed.append((int(fields["PartNumber"]), fields.get("ETag", "").strip('"')))
        if not listed:
            raise XMLError(400, "MalformedXML", "no Part elements")
        return listed

    def _complete(self, handler, bucket, name, upload_id) -> None:
        session = self._session(bucket, name, upload_id)
        listed = self._parse_complete(read_small_body(handler, self._storage))
        with session.lock:
            if self._sessions.get(upload_id) is not session:
                raise _no_such_upload(upload_id)
            numbers = [n for n, _ in listed]
            if any(b <= a for a, b in zip(numbers, numbers[1:], strict=False)):
                raise XMLError(400, "InvalidPartOrder", f"parts {numbers}")
            chosen = []
            for n, etag in listed:
                part = session.parts.get(n)
                if part is None or etag != part.etag:
                    why = (
                        "not uploaded" if part is None else f"ETag {etag!r}, uploaded {part.etag!r}"
                    )
                    raise XMLError(400, "InvalidPart", f"part {n}: {why}")
                chosen.append((n, part))
            for n, part in chosen[:-1]:
                if part.sums.size < MIN_PART_BYTES:
                    raise XMLError(
                        400,
                        "EntityTooSmall",
                        f"part {n} has {part.sums.size} bytes, every part but the last "
                        f"needs {MIN_PART_BYTES}",
                    )
            wanted = handler.headers.get("x-goog-if-generation-match") or (
                session.if_generation_match
            )
            whole = self._storage.new_temp_path()
            try:
                concatenate([part.path for _, part in chosen], whole)
                sums = file_checksums(whole, md5=self._inline_md5)
                obj = self._new_object(
                    handler, bucket, name, session.content_type, session.metadata, sums
                )
                self._storage.commit_file(bucket, name, whole, obj, wanted)
            finally:
                if os.path.exists(whole):
                    os.unlink(whole)
            self._drop(upload_id)
        headers = self._object_headers(obj, sums)
        etag = headers["ETag"]
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<CompleteMultipartUploadResult xmlns="{S3_NAMESPACE}">'
            f"<Location>http://{escape(handler.headers.get('Host') or '')}/{escape(bucket)}/"
            f"{escape(name)}</Location><Bucket>{escape(bucket)}</Bucket>"
            f"<Key>{escape(name)}</Key><ETag>{escape(etag)}</ETag>"
            "</CompleteMultipartUploadResult>"
        ).encode()
        headers["Content-Type"] = "application/xml"
        self._answer(handler, 200, body, headers)

    def _drop(self, upload_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(upload_id, None)
        if session is not None:
            shutil.rmtree(session.folder, ignore_errors=True)

    def _abort(self, handler, bucket, name, upload_id) -> None:
        session = self._session(bucket, name, upload_id)
        with session.lock:
            self._drop(upload_id)
        self._answer(handler, 204)
