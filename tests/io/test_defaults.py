"""gcsckpt.io.defaults against the one C++ table (``_gcsio.DEFAULTS``, cc/gcsio/defaults.h): every
entry has one Python name and no Python name holds a figure of its own, the thread count follows
the machine, and the tuning values keep the relations the defaults module documents (a retuned
table that breaks one fails here rather than in a slow save)."""

from __future__ import annotations

import os

from gcsckpt import _gcsio
from gcsckpt.io import RangeReader, RetryPolicy, Uploader, defaults

# Table entries only the C++ side reads (the token cache's lifetime of a token without expiry).
CC_ONLY = {"token_unknown_ttl_s"}
_RENAMED = {"RETRY_DEADLINE_S": "deadline_s"}  # Python name -> table key where they differ


def _python_names() -> dict[str, object]:
    return {n: v for n, v in vars(defaults).items() if n.isupper() and not n.startswith("_")}


def test_every_table_entry_has_one_python_name_and_no_name_has_its_own_value():
    table = _gcsio.DEFAULTS
    names = _python_names()
    keys = {_RENAMED.get(n, n.lower()): n for n in names}
    assert sorted(set(keys) - set(table)) == []  # a Python-only figure: a second table
    assert sorted(set(table) - set(keys) - CC_ONLY) == []  # a C++ default Python cannot see
    for key, name in keys.items():
        assert names[name] == table[key], name


def test_thread_count_follows_the_cpus():
    assert defaults.NUM_THREADS == min(4, os.cpu_count() or 1)


def test_read_defaults_keep_their_documented_relations():
    assert defaults.MIN_CHUNK_BYTES <= defaults.CHUNK_BYTES
    # The byte budget never binds at the defaults: every request slot can hold a full chunk.
    assert defaults.MAX_INFLIGHT_BYTES >= defaults.MAX_INFLIGHT_REQUESTS * defaults.CHUNK_BYTES


def test_upload_defaults_keep_their_documented_relations():
    # A writer's data object goes up in one PUT; chunks are 256 KiB multiples, as GCS requires.
    assert defaults.UPLOAD_CHUNK_BYTES >= defaults.UPLOAD_OBJECT_BYTES
    assert defaults.UPLOAD_CHUNK_BYTES % (256 << 10) == 0
    # The staging budget holds enough objects to keep every upload slot busy.
    staged = defaults.UPLOAD_STAGING_BYTES // defaults.UPLOAD_OBJECT_BYTES
    assert staged >= defaults.MAX_INFLIGHT_UPLOADS


def test_native_clients_accept_their_own_defaults():
    """The defaults pass the checks every option goes through (no server is contacted)."""
    with (
        RangeReader("http://127.0.0.1:1", send_token=False) as reader,
        Uploader("http://127.0.0.1:1", send_token=False) as uploader,
    ):
        assert reader.retry == uploader.retry == RetryPolicy()  # one retry policy for both
