"""latency_ms and stream_mbps are applied to media reads (checked as lower bounds on time)."""

import time

import numpy as np
import pytest
from http_util import connect, fetch

from gcsckpt.testing import LocalGCS, media_path
from gcsckpt.testing.nginx_config import PACED_CHUNK_BYTES

LATENCY_MS = 120.0
RATE_MBPS = 10.0


@pytest.fixture(scope="module")
def shaped():
    with LocalGCS(latency_ms=LATENCY_MS, stream_mbps=RATE_MBPS) as gcs:
        gcs.create_bucket("bkt")
        data = np.random.default_rng(1).bytes(3_000_000)
        gcs.put("bkt", "obj", data)
        yield gcs, data


def test_first_byte_delay_on_every_media_read(shaped):
    gcs, data = shaped
    conn = connect(gcs.endpoint)
    before = gcs.request_count()
    for first in (0, 1000, len(data) - 10):
        start = time.perf_counter()
        conn.request(
            "GET", media_path("bkt", "obj"), headers={"Range": f"bytes={first}-{first + 9}"}
        )
        resp = conn.getresponse()
        first_byte_s = time.perf_counter() - start
        body = resp.read()
        assert (resp.status, body) == (206, data[first : first + 10])  # Range semantics kept
        assert first_byte_s >= LATENCY_MS / 1000
    start = time.perf_counter()
    status, _, _ = fetch(conn, media_path("bkt", "missing"))
    assert status == 404 and time.perf_counter() - start >= LATENCY_MS / 1000
    entries = gcs.media_requests()[before:]
    assert len(entries) == 4
    assert all(e.duration_s >= LATENCY_MS / 1000 for e in entries)  # nginx's own clock agrees


def test_stream_rate_cap_per_request(shaped):
    gcs, data = shaped
    conn = connect(gcs.endpoint)
    rate = RATE_MBPS * 1e6
    for length in (len(data), 1_500_000):
        start = time.perf_counter()
        status, headers, body = fetch(conn, media_path("bkt", "obj"), f"bytes=0-{length - 1}")
        took = time.perf_counter() - start
        assert (status, body) == (206, data[:length])
        assert headers["content-range"] == f"bytes 0-{length - 1}/{len(data)}"
        # nginx sends at most PACED_CHUNK_BYTES unpaced (the last send), then waits bytes/rate.
        assert took >= LATENCY_MS / 1000 + (length - PACED_CHUNK_BYTES) / rate
