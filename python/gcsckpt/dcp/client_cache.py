"""One ObjectStore and one C++ Uploader per writer configuration and process, kept across saves.

A training job makes a GCSStorageWriter per checkpoint; in `async_save(..., PROCESS)` torch even
pickles the writer into its checkpoint process for every save. Building the clients each time
costs a google-cloud-storage client, C++ uploader threads and cold connections per save, so the
writer takes them from here: keyed by its transfer options (endpoint, token provider, chunk and
in-flight limits, retries), built on first use in this process (a forked child builds its own),
shared by every later writer with the same options. `builds` counts what was built, for tests.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

_KEEP = 8  # configurations kept; an evicted one lives on while a writer still holds it
_lock = threading.Lock()
_cache: OrderedDict[tuple, Any] = OrderedDict()
builds: Counter = Counter()  # kind ("store"/"uploader") -> clients built in this process


def config_key(token_provider: Callable | None, *options: Hashable) -> tuple | None:
    """The cache key of a writer's transfer options, or None when they cannot be shared: a
    token provider that does not pickle (a lambda, a closure) is keyed by nothing stable."""
    if token_provider is None:
        return ("adc", *options)
    try:
        return (pickle.dumps(token_provider), *options)
    except Exception:  # noqa: BLE001 - any pickling failure means "do not share"
        return None


def shared(kind: str, key: tuple | None, build: Callable[[], Any]) -> Any:
    """The client of `kind` for `key` in this process, built by `build()` once; a fresh one
    (not kept) when key is None. Thread-safe; the build runs outside the lock."""
    if key is None:
        builds[kind] += 1
        return build()
    full = (os.getpid(), kind, key)
    with _lock:
        if full in _cache:
            _cache.move_to_end(full)
            return _cache[full]
    made = build()
    with _lock:
        if full in _cache:  # another thread built it meanwhile: keep the first
            return _cache[full]
        builds[kind] += 1
        _cache[full] = made
        while len(_cache) > _KEEP:
            _cache.popitem(last=False)
    return made
