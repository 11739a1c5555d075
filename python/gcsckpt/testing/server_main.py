"""The local endpoint's GCS server (JSON and XML API); LocalGCS starts it behind nginx.

Run as `python -m gcsckpt.testing.server_main --port P --data-dir D` (LocalGCS puts the folder
holding `gcsckpt` on the child's PYTHONPATH); imports only its sibling `gcsckpt.testing.server_*`
modules, the standard library and google-crc32c (never `gcsckpt.io`, whose package loads the
C++ extension and google-cloud-storage).
Why our own server and not gcp-storage-emulator: every part the checkpoint tests lean on was
ours already (uploads off one Python thread, generations nginx can serve, preconditions, XML
multipart uploads, the lazy MD5), grafted on the emulator through its private members; what
the emulator still did (buckets, metadata, listings, deletes) is a few hundred lines here,
with the same upload and download ceilings and fewer lines in all (docs/measurements.md).
Built on the standard library's threaded HTTP server: every upload body is a file nginx wrote,
so the server only parses headers, and each request's blocking file work (rename, copy,
hash) runs on its own thread. Routes: server_uploads.py (JSON uploads), server_xml.py (XML
uploads), and below (buckets, object metadata, listing, delete, compose, copy, move); media reads
are nginx's from disk (a media GET that comes here is answered whole).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gcsckpt.testing.server_http import (
    JSON_API_ROOTS,
    JSON_TYPE,
    APIError,
    Pacing,
    read_small_body,
    send,
)
from gcsckpt.testing.server_objects import (
    Conflict,
    NotFound,
    PreconditionFailed,
    as_api_error,
    object_resource,
    selects_md5,
)
from gcsckpt.testing.server_store import Store
from gcsckpt.testing.server_sums import concatenate, file_checksums
from gcsckpt.testing.server_uploads import JSONUploads
from gcsckpt.testing.server_xml import XMLUploads

EXIT_BIND_FAILED = 3
_PAGE = 1000  # objects per listing page unless maxResults says fewer

_ROUTES = [
    (re.compile(p), name)
    for p, name in (
        (r"^/upload/storage/v1/b/(?P<bucket>[^/]+)/o$", "upload"),
        (r"^/storage/v1/b$", "buckets"),
        (r"^/storage/v1/b/(?P<bucket>[^/]+)$", "bucket"),
        (r"^/storage/v1/b/(?P<bucket>[^/]+)/o$", "objects"),
        (r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>.+)/compose$", "compose"),
        (
            r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>.+)/(?P<verb>copyTo|rewriteTo)"
            r"/b/(?P<dest_bucket>[^/]+)/o/(?P<dest>.+)$",
            "copy",
        ),
        (r"^/storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>.+)/moveTo/o/(?P<dest>.+)$", "move"),
        (r"^/(?:download/)?storage/v1/b/(?P<bucket>[^/]+)/o/(?P<object>.+)$", "object"),
    )
]


def xml_target(raw_path: str) -> tuple[str, str] | None:
    """(bucket, object) of an XML API path `/BUCKET/OBJECT`; None for JSON API paths."""
    path = urllib.parse.urlsplit(raw_path).path
    bucket, sep, name = path.lstrip("/").partition("/")
    if not sep or not name or bucket in JSON_API_ROOTS:
        return None
    return urllib.parse.unquote(bucket), urllib.parse.unquote(name)


class Handler(BaseHTTPRequestHandler):
    """Routes one request; the server's `store`, `json_uploads`, `xml_uploads` serve it."""

    protocol_version = "HTTP/1.1"  # keep-alive (nginx's upstream keepalive)
    server: _Server

    def log_message(self, format, *args) -> None:  # noqa: A002 (base class signature)
        logging.debug("%s %s", self.address_string(), format % args)

    def do_GET(self):  # noqa: N802 (base class naming)
        self._serve(self.command)

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _serve(self, method: str) -> None:
        self._answer_headers: dict[str, str] = {}  # extra headers of a media answer
        split = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        if split.path == "/":
            return send(self, 200, b"OK", {"Content-Type": "text/plain"})
        for pattern, name in _ROUTES:
            match = pattern.match(split.path)
            if match is None:
                continue
            args = {k: urllib.parse.unquote(v) for k, v in match.groupdict().items() if v}
            if name == "upload":
                return self.server.json_uploads.handle(self, method, args["bucket"], query)
            try:
                status, answer = getattr(self, f"_{name}")(method, query, **args)
            except (APIError, NotFound, PreconditionFailed, Conflict, ValueError) as err:
                return as_api_error(err).send(self)
            if isinstance(answer, bytes):
                headers = {"Content-Type": "application/octet-stream", **self._answer_headers}
                return send(self, status, answer, headers)
            body = json.dumps(answer).encode() if answer is not None else b""
            return send(self, status, body, {"Content-Type": JSON_TYPE})
        target = xml_target(self.path)
        if target is not None and not (method in ("GET", "HEAD") and "uploadId" not in query):
            return self.server.xml_uploads.handle(self, method, *target, query)
        APIError(404, "notFound", f"no route for {method} {split.path}").send(self)

    def _json_body(self) -> dict:
        raw = read_small_body(self, self.server.store)
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError as err:
            raise APIError(400, "parseError", f"request body is not JSON: {err}") from err

    def _buckets(self, method, query):
        store = self.server.store
        if method == "POST":
            fields = self._json_body()
            if not fields.get("name"):
                raise APIError(400, "required", "Required parameter: name")
            return 200, store.create_bucket(fields["name"], fields)
        with store.lock:
            return 200, {"kind": "storage#buckets", "items": list(store.buckets.values())}

    def _bucket(self, method, query, bucket):
        store = self.server.store
        if method == "PATCH" or method == "PUT":
            return 200, store.patch_bucket(bucket, self._json_body())
        if method == "DELETE":
            raise APIError(501, "notImplemented", f"deleting bucket {bucket!r} is not supported")
        with store.lock:
            return 200, dict(store.bucket(bucket))

    def _objects(self, method, query, bucket):
        one = lambda key, default="": (query.get(key) or [default])[0]  # noqa: E731
        objs, prefixes = self.server.store.list_objects(
            bucket,
            prefix=one("prefix"),
            delimiter=one("delimiter"),
            soft_deleted=one("softDeleted") == "true",
            md5=selects_md5(query),
        )
        start, end = one("startOffset"), one("endOffset")
        entries = [(o["name"], o) for o in objs if o["name"] >= start]
        entries += [(p, None) for p in prefixes if p >= start]
        entries = sorted((e for e in entries if not end or e[0] < end), key=lambda e: e[0])
        token, size = one("pageToken"), min(int(one("maxResults", str(_PAGE))), _PAGE)
        entries = [e for e in entries if e[0] > token] if token else entries
        page = entries[:size]
        answer = {"kind": "storage#objects", "items": [dict(o) for _, o in page if o]}
        answer["prefixes"] = [key for key, o in page if o is None]
        if len(entries) > size:
            answer["nextPageToken"] = page[-1][0]
        return 200, answer

    def _object(self, method, query, bucket, object):  # noqa: A002 (the route's name)
        store, one = self.server.store, lambda key: (query.get(key) or [None])[0]
        if method == "DELETE":
            store.delete_object(bucket, object, one("ifGenerationMatch"))
            return 204, None
        if method in ("PATCH", "PUT"):
            return 200, store.patch_object(bucket, object, self._json_body())
        generation = one("generation")
        if one("softDeleted") == "true":
            return 200, dict(store.get_soft_deleted(bucket, object, generation, selects_md5(query)))
        with store.lock:
            obj = dict(store.get_object(bucket, object, selects_md5(query)))
            store.check_precondition(bucket, object, one("ifGenerationMatch"))
            if generation and generation != obj["generation"]:
                raise NotFound(f"gs://{bucket}/{object} has no generation {generation}")
            if one("alt") != "media":
                return 200, obj
            path = store.generation_file(bucket, object, obj["generation"])
        with open(path, "rb") as f:  # an open link keeps its generation's bytes
            return self._media(f, obj)

    def _media(self, f, obj: dict) -> tuple[int, bytes]:
        """A media read nginx passed on (a name with a segment over 255 bytes, which nginx
        cannot open): the whole object (200) or one `Range: bytes=a-b` of it (206, 416 past
        the end), with `x-goog-generation`."""
        size = int(obj["size"])
        self._answer_headers = {"x-goog-generation": str(obj["generation"])}
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if match is None:
            return 200, f.read()
        first = int(match[1])
        last = min(int(match[2]) if match[2] else size - 1, size - 1)
        if first >= size or last < first:
            raise APIError(416, "invalid", f"range {match[0]} is not satisfiable (size {size})")
        f.seek(first)
        self._answer_headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        return 206, f.read(last - first + 1)

    def _compose(self, method, query, bucket, object):  # noqa: A002
        request = self._json_body()
        sources = [s["name"] for s in request.get("sourceObjects") or []]
        if not sources:
            raise APIError(400, "required", "compose needs sourceObjects")
        dest = request.get("destination") or {}
        paths = self._pinned_files(bucket, sources)
        return 200, self._commit_copy(bucket, object, paths, dest, query)

    def _copy(self, method, query, bucket, object, verb, dest_bucket, dest):  # noqa: A002
        source = self.server.store.get_object(bucket, object, md5=False)
        fields = {"contentType": source.get("contentType"), "metadata": source.get("metadata")}
        fields.update(self._json_body())
        obj = self._commit_copy(
            dest_bucket, dest, self._pinned_files(bucket, [object]), fields, query
        )
        if verb == "copyTo":
            return 200, obj
        size = obj["size"]
        rewrite = {"kind": "storage#rewriteResponse", "done": True, "resource": obj}
        return 200, {**rewrite, "totalBytesRewritten": size, "objectSize": size}

    def _move(self, method, query, bucket, object, dest):  # noqa: A002
        """JSON API objects.move (same bucket; gcsfs renames with it): the live generation is
        copied to `dest` and then deleted at that generation, so a source rewritten meanwhile
        fails with 412 and is kept."""
        source = self.server.store.get_object(bucket, object, md5=False)
        wanted = (query.get("ifSourceGenerationMatch") or query.get("sourceGeneration") or [None])[
            0
        ]
        if wanted is not None and str(wanted) != str(source["generation"]):
            raise PreconditionFailed(f"gs://{bucket}/{object} is not at generation {wanted}")
        fields = {"contentType": source.get("contentType"), "metadata": source.get("metadata")}
        obj = self._commit_copy(bucket, dest, self._pinned_files(bucket, [object]), fields, query)
        self.server.store.delete_object(bucket, object, if_generation_match=source["generation"])
        return 200, obj

    def _pinned_files(self, bucket: str, names: list[str]) -> list[str]:
        """Open-able paths of the live generations of `names` (their hard links)."""
        store = self.server.store
        with store.lock:
            objs = [store.get_object(bucket, n, md5=False) for n in names]
            return [
                store.generation_file(bucket, n, o["generation"])
                for n, o in zip(names, objs, strict=True)
            ]

    def _commit_copy(self, bucket, name, paths, fields, query) -> dict:
        store = self.server.store
        whole = store.new_temp_path()
        concatenate(paths, whole)
        sums = file_checksums(whole)
        content_type = fields.get("contentType") or "application/octet-stream"
        host = self.headers.get("Host") or "127.0.0.1"
        obj = object_resource(host, bucket, name, content_type, fields, sums)
        wanted = (query.get("ifGenerationMatch") or [None])[0]
        return store.commit_file(bucket, name, whole, obj, wanted)


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the standard 5 drops connections under load
    daemon_threads = True

    def __init__(self, address, store: Store, pacing: Pacing, inline_md5: bool) -> None:
        super().__init__(address, Handler)
        self.store = store
        self.json_uploads = JSONUploads(store, pacing, inline_md5=inline_md5)
        self.xml_uploads = XMLUploads(store, pacing, inline_md5=inline_md5)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", required=True, help="absolute path of the data dir")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--upload-latency-ms", type=float, default=0.0, help="first-byte delay of upload answers"
    )
    parser.add_argument(
        "--upload-rate", type=float, default=0.0, help="per-upload bytes/s cap (0: none)"
    )
    parser.add_argument(
        "--md5-in-upload-answers",
        action="store_true",
        help="compute every upload's MD5 while answering it (default: only when one is sent)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    store = Store(args.data_dir)
    pacing = Pacing(args.upload_latency_ms / 1000.0, args.upload_rate)
    try:
        httpd = _Server((args.host, args.port), store, pacing, args.md5_in_upload_answers)
    except OSError as err:
        print(f"server cannot bind {args.host}:{args.port}: {err}", flush=True)
        return EXIT_BIND_FAILED
    print(f"server listening on {args.host}:{args.port}, data in {args.data_dir}", flush=True)
    # LocalGCS stops the server with SIGTERM: leave serve_forever so `.meta` is flushed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        store.flush_metadata()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
