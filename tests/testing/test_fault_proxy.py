"""FaultProxy between a plain http.client and LocalGCS: every fault kind, matching, exact counts."""

import http.client
import json
import random
import socket
import time

import numpy as np
import pytest
from http_util import connect, error_code, fetch

from gcsckpt.testing import FAULT_KINDS, Fault, FaultProxy, media_path, quote_object
from gcsckpt.testing.json_api import upload

SIZE = 2_000_000


@pytest.fixture(scope="module")
def data(gcs):
    gcs.create_bucket("fpx")
    payload = np.random.default_rng(11).bytes(SIZE)
    gcs.put("fpx", "ckpt/__0_0.distcp", payload)
    gcs.put("fpx", "other", payload[:1000])
    return payload


PATH = media_path("fpx", "ckpt/__0_0.distcp")


def _no_faults() -> dict[str, int]:
    return dict.fromkeys(FAULT_KINDS, 0)


def test_passthrough_is_byte_exact_with_keep_alive(gcs, data):
    with FaultProxy(gcs.endpoint) as proxy:
        conn = connect(proxy.endpoint)
        rng = random.Random(5)
        sock = None
        for _ in range(40):
            first = rng.randrange(SIZE)
            last = min(SIZE - 1, first + rng.choice([0, 100, 65536, 1 << 20]))
            status, headers, body = fetch(conn, PATH, f"bytes={first}-{last}")
            assert (status, body) == (206, data[first : last + 1])
            assert headers["content-range"] == f"bytes {first}-{last}/{SIZE}"
            sock = sock or conn.sock
            assert conn.sock is sock  # one client connection throughout
        assert fetch(conn, PATH)[2] == data
        assert fetch(conn, PATH, method="HEAD")[1]["content-length"] == str(SIZE)
        assert fetch(conn, PATH, "bytes=-5")[2] == data[-5:]
        status, _, body = fetch(conn, f"/storage/v1/b/fpx/o/{quote_object('other')}")
        assert status == 200 and json.loads(body)["size"] == "1000"
        upload(proxy.endpoint, "fpx", "via proxy/ü", b"uploaded through the proxy")
        assert gcs.get("fpx", "via proxy/ü") == b"uploaded through the proxy"
        assert fetch(conn, media_path("fpx", "absent"))[0] == 404
        assert proxy.counts == _no_faults()
        assert proxy.requests == 46


@pytest.mark.parametrize("status", [503, 429, 500, 404, 401, 403])
def test_status_burst_then_success(gcs, data, status):
    with FaultProxy(gcs.endpoint, [Fault("status", status=status, count=3)]) as proxy:
        conn = connect(proxy.endpoint)
        for _ in range(3):
            got, headers, body = fetch(conn, PATH, "bytes=0-99")
            assert got == status and error_code(body) == status
            assert headers["content-type"] == "application/json"
        assert fetch(conn, PATH, "bytes=0-99")[:3:2] == (206, data[:100])
        assert proxy.counts == {**_no_faults(), "status": 3}
        assert proxy.requests == 4


def test_nth_request_only(gcs, data):
    with FaultProxy(gcs.endpoint, [Fault("status", status=500, nth=2)]) as proxy:
        conn = connect(proxy.endpoint)
        statuses = [fetch(conn, PATH, "bytes=0-9")[0] for _ in range(4)]
        assert statuses == [206, 500, 206, 206]
        assert proxy.counts["status"] == 1


def test_every_request_for_one_object(gcs, data):
    fault = Fault("status", status=503, count=None, object_name="ckpt/__0_0.distcp")
    with FaultProxy(gcs.endpoint, [fault]) as proxy:
        conn = connect(proxy.endpoint)
        assert [fetch(conn, PATH, "bytes=0-9")[0] for _ in range(5)] == [503] * 5
        assert fetch(conn, media_path("fpx", "other"))[:3:2] == (200, data[:1000])
        assert proxy.counts["status"] == 5 and proxy.requests == 6


def test_media_only_spares_metadata_unless_asked(gcs, data):
    meta_path = "/storage/v1/b/fpx/o/other"
    with FaultProxy(gcs.endpoint, [Fault("status", count=None)]) as proxy:
        conn = connect(proxy.endpoint)
        assert fetch(conn, meta_path)[0] == 200
        assert fetch(conn, PATH)[0] == 503
        proxy.set_faults([Fault("status", status=500, count=None, media_only=False)])
        assert fetch(conn, meta_path)[0] == 500
        assert proxy.counts == {**_no_faults(), "status": 1}
        assert proxy.requests == 1


def test_reset_mid_body(gcs, data):
    with FaultProxy(gcs.endpoint, [Fault("reset_mid_body", after_bytes=1000)]) as proxy:
        conn = connect(proxy.endpoint)
        conn.request("GET", PATH, headers={"Range": "bytes=0-499999"})
        resp = conn.getresponse()
        assert resp.status == 206 and resp.length == 500_000
        received = b""
        with pytest.raises(ConnectionResetError):
            while chunk := resp.read1(65536):
                received += chunk
        assert received == data[:1000]
        assert fetch(connect(proxy.endpoint), PATH, "bytes=0-9")[2] == data[:10]  # next is fine
        assert proxy.counts == {**_no_faults(), "reset_mid_body": 1}


def test_short_body_closes_cleanly_early(gcs, data):
    with FaultProxy(gcs.endpoint, [Fault("short_body", after_bytes=777, count=2)]) as proxy:
        for _ in range(2):
            conn = connect(proxy.endpoint)
            conn.request("GET", PATH, headers={"Range": "bytes=10-100009"})
            resp = conn.getresponse()
            with pytest.raises(http.client.IncompleteRead) as err:
                resp.read()
            assert err.value.partial == data[10:787]
            assert err.value.expected == 100_000 - 777
        assert fetch(connect(proxy.endpoint), PATH, "bytes=10-100009")[2] == data[10:100010]
        assert proxy.counts == {**_no_faults(), "short_body": 2}


def test_stall_times_out_a_client_then_delivers_to_a_patient_one(gcs, data):
    with FaultProxy(
        gcs.endpoint, [Fault("stall", stall_s=1.0, after_bytes=5000, count=2)]
    ) as proxy:
        impatient = connect(proxy.endpoint, timeout_s=0.3)
        impatient.request("GET", PATH, headers={"Range": "bytes=0-99999"})
        resp = impatient.getresponse()
        received = b""
        with pytest.raises(TimeoutError):
            while chunk := resp.read1(65536):
                received += chunk
        assert received == data[:5000]
        patient = connect(proxy.endpoint, timeout_s=30)
        start = time.perf_counter()
        status, _, body = fetch(patient, PATH, "bytes=0-99999")
        assert (status, body) == (206, data[:100_000])
        assert time.perf_counter() - start >= 1.0
        assert proxy.counts == {**_no_faults(), "stall": 2}


def test_wrong_content_range(gcs, data):
    with FaultProxy(gcs.endpoint, [Fault("wrong_content_range", count=2)]) as proxy:
        conn = connect(proxy.endpoint)
        status, headers, body = fetch(conn, PATH, "bytes=100-199")
        assert (status, body) == (206, data[100:200])
        assert headers["content-range"] == f"bytes 101-200/{SIZE}"
        status, headers, body = fetch(conn, media_path("fpx", "other"))  # a 200 becomes a bad 206
        assert (status, body) == (206, data[:1000])
        assert headers["content-range"] == "bytes 1-1000/1001"
        status, headers, _ = fetch(conn, PATH, "bytes=100-199")
        assert headers["content-range"] == f"bytes 100-199/{SIZE}"
        assert proxy.counts == {**_no_faults(), "wrong_content_range": 2}


def test_ignore_range_ignore_generation_and_echoed_headers(gcs, data):
    old = gcs.put("fpx", "versioned", b"old bytes")
    new = gcs.put("fpx", "versioned", b"new bytes")
    faults = [
        Fault("ignore_range", count=1),
        Fault("ignore_generation", count=1, object_name="versioned"),
        Fault("status", status=500, count=1, echo_headers=True, media_only=False),
    ]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        conn = connect(proxy.endpoint)
        status, _, body = fetch(conn, PATH, "bytes=100-199")
        assert (status, body) == (200, data)  # the whole object
        old_path = media_path("fpx", "versioned") + f"&generation={old}"
        status, headers, body = fetch(conn, old_path)  # asked old, got the live one
        assert (status, headers["x-goog-generation"], body) == (200, str(new), b"new bytes")
        conn.request("GET", "/storage/v1/b/fpx/o", headers={"Authorization": "Bearer t0k"})
        resp = conn.getresponse()
        echoed = json.loads(resp.read())["error"]["message"]
        assert resp.status == 500 and "Bearer t0k" in echoed and "credential t0k" in echoed
        assert fetch(conn, old_path)[0] == 404  # each rule's one injection is spent
        assert proxy.request_ranges == ["bytes=100-199", None, None, None]
        assert proxy.counts == {
            **_no_faults(),
            "ignore_range": 1,
            "ignore_generation": 1,
            "status": 1,
        }


def test_first_matching_rule_wins_and_each_counts(gcs, data):
    faults = [Fault("status", status=503, count=2), Fault("short_body", nth=4, after_bytes=1)]
    with FaultProxy(gcs.endpoint, faults) as proxy:
        outcomes = []
        for _ in range(5):
            conn = connect(proxy.endpoint)
            try:
                outcomes.append(fetch(conn, PATH, "bytes=0-9")[0])
            except http.client.IncompleteRead:
                outcomes.append("short")
        assert outcomes == [503, 503, 206, "short", 206]
        assert proxy.injected_per_fault == [2, 1]


def test_stop_closes_idle_connections_and_port(gcs, data):
    proxy = FaultProxy(gcs.endpoint).start()
    conn = connect(proxy.endpoint)
    assert fetch(conn, PATH, "bytes=0-0")[2] == data[:1]
    port = conn.sock.getpeername()[1]
    proxy.stop()  # returns although a kept-alive client connection is still open
    proxy.stop()  # idempotent
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_upstream_down_answers_502():
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        dead = placeholder.getsockname()[1]  # bound, never listening: connections are refused
        with FaultProxy(f"http://127.0.0.1:{dead}") as proxy:
            conn = connect(proxy.endpoint)
            for _ in range(2):  # the client connection stays usable
                status, _, body = fetch(conn, PATH)
                assert status == 502 and error_code(body) == 502
                assert f"127.0.0.1:{dead}" in json.loads(body)["error"]["message"]
            assert proxy.counts == _no_faults()


def test_bad_rules_are_rejected():
    with pytest.raises(ValueError, match="kind"):
        Fault("explode")
    with pytest.raises(ValueError, match="count"):
        Fault("status", count=0)
    with pytest.raises(ValueError, match="nth"):
        Fault("status", nth=0)
    with pytest.raises(ValueError, match="status"):
        Fault("status", status=42)
    with pytest.raises(ValueError, match="upstream"):
        FaultProxy("127.0.0.1:80")
