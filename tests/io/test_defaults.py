"""One table of defaults: gcsckpt.io.defaults, RangeReader, RetryPolicy and the token provider
agree with the C++ table (cc/gcsio/defaults.h, exported as ``_gcsio.DEFAULTS``) and with the
figures the defaults module documents."""

from __future__ import annotations

import os

import _gcsio

from gcsckpt.io import RangeReader, RetryPolicy, Uploader, auth, defaults

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def test_python_names_come_from_the_cc_table():
    table = _gcsio.DEFAULTS
    assert defaults.MAX_INFLIGHT_REQUESTS == table["max_inflight_requests"] == 64
    assert defaults.MAX_INFLIGHT_BYTES == table["max_inflight_bytes"] == GiB
    assert defaults.CHUNK_BYTES == table["chunk_bytes"] == 8 * MiB
    assert defaults.MIN_CHUNK_BYTES == table["min_chunk_bytes"] == 2 * MiB
    assert defaults.COALESCE_GAP_BYTES == table["coalesce_gap_bytes"] == 16 * KiB
    assert defaults.NUM_THREADS == table["num_threads"] == min(4, os.cpu_count() or 1)
    assert defaults.RECV_BUFFER_BYTES == table["recv_buffer_bytes"] == 256 * KiB
    assert defaults.CONNECT_TIMEOUT_S == table["connect_timeout_s"] == 10.0
    assert defaults.STALL_TIMEOUT_S == table["stall_timeout_s"] == 30.0
    assert defaults.MAX_ATTEMPTS == table["max_attempts"] == 6
    assert defaults.INITIAL_BACKOFF_S == table["initial_backoff_s"] == 0.05
    assert defaults.MAX_BACKOFF_S == table["max_backoff_s"] == 2.0
    assert defaults.RETRY_DEADLINE_S == table["deadline_s"] == 120.0
    assert defaults.TOKEN_REFRESH_MARGIN_S == table["token_refresh_margin_s"] == 300.0
    assert auth.REFRESH_MARGIN_S == defaults.TOKEN_REFRESH_MARGIN_S


def test_reader_and_retry_policy_default_to_the_table():
    with RangeReader("http://127.0.0.1:1", send_token=False) as reader:
        assert reader.options == {
            "max_inflight_requests": defaults.MAX_INFLIGHT_REQUESTS,
            "max_inflight_bytes": defaults.MAX_INFLIGHT_BYTES,
            "chunk_bytes": defaults.CHUNK_BYTES,
            "coalesce_gap_bytes": defaults.COALESCE_GAP_BYTES,
            "min_chunk_bytes": defaults.MIN_CHUNK_BYTES,
            "num_threads": defaults.NUM_THREADS,
            "connect_timeout_s": defaults.CONNECT_TIMEOUT_S,
            "stall_timeout_s": defaults.STALL_TIMEOUT_S,
            "recv_buffer_bytes": defaults.RECV_BUFFER_BYTES,
        }
        assert reader.retry == RetryPolicy()
    policy = RetryPolicy()
    assert (
        policy.max_attempts,
        policy.initial_backoff_s,
        policy.max_backoff_s,
        policy.deadline_s,
    ) == (
        defaults.MAX_ATTEMPTS,
        defaults.INITIAL_BACKOFF_S,
        defaults.MAX_BACKOFF_S,
        defaults.RETRY_DEADLINE_S,
    )


def test_upload_defaults_come_from_the_cc_table():
    table = _gcsio.DEFAULTS
    assert defaults.MAX_INFLIGHT_UPLOADS == table["max_inflight_uploads"] == 16
    assert defaults.UPLOAD_INFLIGHT_BYTES == table["upload_inflight_bytes"] == GiB
    assert defaults.UPLOAD_CHUNK_BYTES == table["upload_chunk_bytes"] == 64 * MiB
    assert defaults.UPLOAD_OBJECT_BYTES == table["upload_object_bytes"] == 16 * MiB
    assert defaults.UPLOAD_STAGING_BYTES == table["upload_staging_bytes"] == 256 * MiB
    with Uploader("http://127.0.0.1:1", send_token=False) as uploader:
        assert uploader.options == {
            "max_inflight_requests": defaults.MAX_INFLIGHT_UPLOADS,
            "max_inflight_bytes": defaults.UPLOAD_INFLIGHT_BYTES,
            "chunk_bytes": defaults.UPLOAD_CHUNK_BYTES,
            "connect_timeout_s": defaults.CONNECT_TIMEOUT_S,
            "stall_timeout_s": defaults.STALL_TIMEOUT_S,
        }
        assert uploader.retry == RetryPolicy()
