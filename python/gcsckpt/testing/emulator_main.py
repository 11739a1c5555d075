"""Runs gcp-storage-emulator in on-disk mode; started by LocalGCS as `python emulator_main.py ...`.

Why not the emulator's own CLI: it binds inside a thread and hangs forever when the port is taken,
and its listen backlog of 5 drops connections under load. Here binding failures exit with status 3
and the backlog is 1024. Imports only the emulator, so it runs without gcsckpt on sys.path.

What this wrapper adds so that the endpoint behaves like GCS where readers and writers depend on
it (the pinned gcp-storage-emulator lacks all of it):

- Generations nginx can serve (emulator_storage.py: one counter, atomic renames, one hard link
  per live version, mtimes that spell the generation so nginx's ETag carries it).
  Chosen over routing reads through Python (an auth_request / X-Accel-Redirect lookup per
  GET): that costs a Python round trip per read, which the stock baseline's ~400k small GETs
  per round would feel; this adds one map lookup (and, for pinned reads, one internal redirect)
  to nginx's static-file path. Measured (RangeReader, 16 parallel 8 MiB GETs of a 128 MiB
  object, median of 9 rounds, runs interleaved with the previous endpoint and reader, 2 cores
  shared at load average ~17): before 850 / 820 MB/s, after 860 / 840 MB/s (the reader now
  sends generation= after the first answer, so this includes the pinned path); 280 x 64 KiB
  GETs, 16 in flight: before 6769 / 4703, after 5056 / 4884 requests/s (noise of that load).
- Preconditions on uploads: `ifGenerationMatch` on media, multipart and resumable uploads
  (checked when the session starts and when the object is written) answers 412 when the
  object's generation differs; `ifGenerationMatch=0` means "only if absent".
- The XML API's uploads (emulator_xml.py): simple PUT and the multipart upload that
  google-cloud-storage's transfer_manager (and the writers built on it) use.
- Uploads off the single Python thread (emulator_uploads.py, emulator_http.py): nginx writes
  every upload body to a file on the data disk and sends only its path (nginx_config.py); the
  JSON media, multipart and resumable uploads and the XML ones are handled here, not by the
  emulator's handlers (which read a body into Python bytes, copy it, hash it and write it again,
  all on one thread): a media body is renamed into place, multipart content and resumable chunks
  are copied in the kernel, crc32c (google-crc32c) is read from the file, at most one hash per
  CPU at a time (MD5: next item). The server is threaded (ThreadingHTTPServer); one lock
  (`storage.lock`) guards the emulator's metadata: every request the emulator's own handlers
  serve runs under it, uploads take it only to commit (precondition, generation, rename). Chosen
  by measurement (`measure_upload_ceiling`, 16 parallel 64 MiB media uploads per round, the
  variants' rounds interleaved in one run, 2 cores shared with other jobs): at load average 8-9,
  median of 5 rounds: the emulator as it was 110 MB/s; nginx body files with the emulator serial
  251 MB/s (x2.3); a threaded emulator with bodies proxied through a socket 145 MB/s (x1.3);
  both 244 MB/s (x2.2); then, with one hash per CPU, at load 5-9: as it was 134 MB/s, serial
  with body files 319 MB/s (x2.4), both 402 MB/s (x3.0, best round 731 MB/s). CPU per 2 GiB
  uploaded: before 7.9 s Python + 4.2 s nginx, after 4.1 s + 1.2 s, of which md5 (~0.7 GB/s per
  core) was ~2.9 s; so the ceiling became the CPUs' md5 rate, where it was one Python thread
  (next item takes md5 off). fake-gcs-server (Go) was not measured: it is not in the lock, lacks
  XML multipart uploads and ignores ifGenerationMatch on uploads, so it would need this fronting
  anyway.
- MD5 off the upload path (emulator_storage.LazyMD5; what each client checks in an upload answer
  is in emulator_uploads.py and emulator_xml.py): an upload answer carries crc32c and has
  md5Hash only when the request sent an MD5 to check; otherwise a worker thread at idle
  scheduling priority computes it when the CPUs have nothing else to do, and any answer that
  carries md5Hash (metadata GET, listing, ...) finishes it on demand. Why: this endpoint shares
  its CPUs with the ranks whose save it measures; a system-wide `perf record` of one 8-rank 990
  MB DCP save on 2 cores had the emulator at 2.3-3.0 core-s per save, ~1.3 of them MD5
  (libcrypto), i.e. 10-14% of the machine, while GCS computes MD5 on its own servers. Measured
  (`tools/bazel run --config=ci //bench:upload_ceiling -- --endpoint=E --bucket=B --rounds=5`
  against a LocalGCS started around it, 16 parallel 64 MiB media uploads per round, 5.4 GB
  timed; nginx's and emulator_main's CPU seconds read with psutil before and after; old and new
  endpoint interleaved, 3 runs each, 2 cores, load average 1.3-2.9): median 552-718 MB/s before,
  879-1246 MB/s after (x1.6-2.2); emulator CPU per GB uploaded while the benchmark ran 1.77-1.82
  s before, 0.64-0.69 s after; nginx 0.45-0.52 s per GB in both. One more pair at load average
  8-9 (other jobs on the cores): 248 MB/s before, 556 after (x2.2); emulator 1.88 and 0.69 s per
  GB. Once the idle worker had drained, the emulator's total was 0.91-0.97 s per GB: the worker
  hashes only generations still live at its turn (each round here replaced the last one's
  objects, so 1.07 of the 5.4 GB were hashed).
- The latency model on uploads (`--upload-latency-ms`, `--upload-rate`, from LocalGCS's
  latency_ms / stream_mbps): every upload answer is held until `latency` after the request's
  first byte (nginx's `$request_time`) plus body bytes / rate; nginx cannot pace request
  bodies, so the client's send is not slowed, only the answer that completes the request.
- 0-byte media uploads: the emulator reads an empty body as "no body" (None) and then fails on
  len(None), which nginx reported as 502; here an empty media body is b"".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import urllib.parse
from functools import partial
from http.server import ThreadingHTTPServer

# Siblings, imported as top-level modules (this file runs as a script, its folder on sys.path).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emulator_storage  # noqa: E402
from emulator_http import JSON_API_ROOTS  # noqa: E402
from emulator_storage import REQUEST, PreconditionFailed  # noqa: E402

EXIT_BIND_FAILED = 3
EXIT_EMULATOR_MISSING = 4


_UPLOAD_PATH = re.compile(r"^/upload/storage/v1/b/([^/]+)/o$")


class _ThreadedHTTPServer(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


def xml_target(raw_path: str) -> tuple[str, str] | None:
    """(bucket, object) of an XML API path `/BUCKET/OBJECT`; None for JSON API paths."""
    path = urllib.parse.urlsplit(raw_path).path
    bucket, sep, name = path.lstrip("/").partition("/")
    if not sep or not name or bucket in JSON_API_ROOTS:
        return None
    return urllib.parse.unquote(bucket), urllib.parse.unquote(name)


def _make_handler_class(base, json_uploads, xml_uploads):
    """The emulator's RequestHandler with the JSON API's uploads (emulator_uploads.py) and the
    XML API's (emulator_xml.py) in place of its own, and 412 for failed upload preconditions
    of its other handlers; everything else of the emulator's runs under the storage lock."""

    class Handler(base):
        def _upload(self, method: str) -> bool:
            split = urllib.parse.urlsplit(self.path)
            match = _UPLOAD_PATH.match(split.path)
            if match is None:
                return False
            query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
            json_uploads.handle(self, method, urllib.parse.unquote(match.group(1)), query)
            return True

        def _xml(self, method: str) -> bool:
            target = xml_target(self.path)
            if target is None:
                return False
            query = urllib.parse.parse_qs(
                urllib.parse.urlsplit(self.path).query, keep_blank_values=True
            )
            if method == "GET" and "uploadId" not in query:
                return False  # reads: the emulator's download (nginx serves them from disk)
            xml_uploads.handle(self, method, *target, query)
            return True

        def _routed(self, method_name: str) -> None:
            REQUEST.query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            try:
                with self.storage.lock:
                    getattr(super(), method_name)()
            except PreconditionFailed as err:
                body = json.dumps(
                    {
                        "error": {
                            "code": 412,
                            "message": str(err),
                            "errors": [{"reason": "conditionNotMet", "message": str(err)}],
                        }
                    }
                ).encode()
                self.send_response(412, "Precondition Failed")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            finally:
                REQUEST.query = {}

        def do_GET(self):  # noqa: N802 (base class naming)
            if not self._xml("GET"):
                self._routed("do_GET")

        def do_POST(self):  # noqa: N802
            if not self._upload("POST") and not self._xml("POST"):
                self._routed("do_POST")

        def do_PUT(self):  # noqa: N802
            if not self._upload("PUT") and not self._xml("PUT"):
                self._routed("do_PUT")

        def do_DELETE(self):  # noqa: N802
            if not self._upload("DELETE") and not self._xml("DELETE"):
                self._routed("do_DELETE")

        def do_PATCH(self):  # noqa: N802
            self._routed("do_PATCH")

    return Handler


def _allow_empty_media_bodies(server_module) -> None:
    """An empty media upload body is b"" (the emulator reads it as None, then fails)."""
    read_data = server_module._read_data

    def _read_data(request_handler, query):
        data = read_data(request_handler, query)
        if data is None and query.get("uploadType") == ["media"]:
            return b""
        return data

    server_module._read_data = _read_data


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--data-dir", required=True, help="absolute path; objects live in .cloudstorage"
    )
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
    try:
        from gcp_storage_emulator import server as emulator_server
        from gcp_storage_emulator.handlers import objects as objects_handlers
        from gcp_storage_emulator.storage import RESUMABLE_DIR, Storage
    except ImportError as err:
        print(f"gcp-storage-emulator is not importable ({err}); pip install gcp-storage-emulator")
        return EXIT_EMULATOR_MISSING
    from emulator_http import Pacing
    from emulator_uploads import JSONUploads
    from emulator_xml import XMLUploads

    _allow_empty_media_bodies(emulator_server)
    storage_class = emulator_storage.make_storage_class(Storage, RESUMABLE_DIR)
    storage = storage_class(use_memory_fs=False, data_dir=args.data_dir)
    pacing = Pacing(args.upload_latency_ms / 1000.0, args.upload_rate)
    make_object = objects_handlers._make_object_resource
    inline_md5 = args.md5_in_upload_answers
    json_uploads = JSONUploads(storage, make_object, pacing, inline_md5=inline_md5)
    xml_uploads = XMLUploads(storage, make_object, pacing, inline_md5=inline_md5)
    handler = _make_handler_class(emulator_server.RequestHandler, json_uploads, xml_uploads)
    try:
        httpd = _ThreadedHTTPServer((args.host, args.port), partial(handler, storage))
    except OSError as err:
        print(f"emulator cannot bind {args.host}:{args.port}: {err}", flush=True)
        return EXIT_BIND_FAILED
    print(f"emulator listening on {args.host}:{args.port}, data in {args.data_dir}", flush=True)
    # LocalGCS stops the emulator with SIGTERM: leave serve_forever so `.meta` is flushed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
        storage.flush_metadata()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
