"""Runs gcp-storage-emulator in on-disk mode; started by LocalGCS as `python emulator_main.py ...`.

Why not the emulator's own CLI: it binds inside a thread and hangs forever when the port is taken,
and its listen backlog of 5 drops connections under load. Here binding failures exit with status 3
and the backlog is 1024. Imports only the emulator, so it runs without gcsckpt on sys.path.
"""

from __future__ import annotations

import argparse
import logging
import sys
from functools import partial
from http.server import HTTPServer

EXIT_BIND_FAILED = 3
EXIT_EMULATOR_MISSING = 4


class _BackloggedHTTPServer(HTTPServer):
    request_queue_size = 1024


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--data-dir", required=True, help="absolute path; objects live in .cloudstorage"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    try:
        from gcp_storage_emulator.server import RequestHandler
        from gcp_storage_emulator.storage import Storage
    except ImportError as err:
        print(f"gcp-storage-emulator is not importable ({err}); pip install gcp-storage-emulator")
        return EXIT_EMULATOR_MISSING
    storage = Storage(use_memory_fs=False, data_dir=args.data_dir)
    try:
        httpd = _BackloggedHTTPServer((args.host, args.port), partial(RequestHandler, storage))
    except OSError as err:
        print(f"emulator cannot bind {args.host}:{args.port}: {err}", flush=True)
        return EXIT_BIND_FAILED
    print(f"emulator listening on {args.host}:{args.port}, data in {args.data_dir}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
