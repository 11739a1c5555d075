"""Reads nginx's media access log (one tab-separated line per media read it answered)."""

from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass(frozen=True)
class MediaRequest:
    """One media read as nginx logged it.

    Attributes:
      finished_at: Unix time the response finished, seconds.
      status: HTTP status sent (200, 206, 404, 416, ...).
      body_bytes: response body bytes sent.
      duration_s: nginx's request time, seconds (includes any configured first-byte delay).
      range: the request's Range header, or None.
      uri: the raw request URI, still percent-encoded.
    """

    finished_at: float
    status: int
    body_bytes: int
    duration_s: float
    range: str | None
    uri: str


def parse_line(line: str) -> MediaRequest:
    """Parses one log line.

    Raises:
      ValueError: when the line does not have the six fields of nginx_config.MEDIA_LOG_FORMAT.
    """
    fields = line.rstrip("\n").split("\t")
    if len(fields) != 6:
        raise ValueError(f"media log line has {len(fields)} fields, want 6: {line!r}")
    msec, status, sent, took, rng, uri = fields
    return MediaRequest(
        float(msec), int(status), int(sent), float(took), None if rng == "-" else rng, uri
    )


def read_media_log(path: str) -> list[MediaRequest]:
    """Every complete line of the log at `path` (empty when the file does not exist yet)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            text = log.read()
    except FileNotFoundError:
        return []
    lines = text.split("\n")[:-1]  # a trailing partial line is still being written
    return [parse_line(line) for line in lines if line]


def settled_media_log(
    path: str, quiet_s: float = 0.03, max_wait_s: float = 1.0
) -> list[MediaRequest]:
    """The log once it stopped growing for `quiet_s` seconds (bounded by `max_wait_s`).

    nginx writes a line just after the last byte went out, so a client that has read a whole
    response may look at the log a moment too early; waiting for quiet makes counts exact.
    """
    deadline = time.monotonic() + max_wait_s
    entries = read_media_log(path)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        again = read_media_log(path)
        if len(again) == len(entries):
            return again
        entries = again
    return entries
