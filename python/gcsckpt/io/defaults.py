"""Default tuning of RangeReader and Uploader, timeouts, retry and token refresh, for Python.

The values live in one table shared with the C++ side, ``cc/gcsio/defaults.h``, which the
extension exports as ``_gcsio.DEFAULTS``; this module only names them (RangeReader, Uploader,
RetryPolicy, the token provider), so the two languages cannot disagree. Each name carries a
one-line reason; the measurements behind the tuning values (``//bench:range_read -- --tune``,
``//bench:save_path``) are in docs/measurements.md, "Tuning constants".
"""

from gcsckpt.io.extension import _gcsio

_TABLE = _gcsio.DEFAULTS

# Range reader.
# Latency-bound reads scale with requests in flight (the bound is n / first-byte latency).
MAX_INFLIGHT_REQUESTS: int = _TABLE["max_inflight_requests"]
# Bytes wanted by running requests: above requests x chunk, so it bounds work, not throughput.
MAX_INFLIGHT_BYTES: int = _TABLE["max_inflight_bytes"]
# Longest GET: long enough to amortize first-byte latency, short enough for parallel streams.
CHUNK_BYTES: int = _TABLE["chunk_bytes"]
# Shortest cut of a small submit, so that about half the request slots run at once.
MIN_CHUNK_BYTES: int = _TABLE["min_chunk_bytes"]
# Largest hole read through to join two ranges; larger ones fetch many bytes nobody needs.
COALESCE_GAP_BYTES: int = _TABLE["coalesce_gap_bytes"]
# min(4, CPUs) curl multi threads: one thread tops out below what two carry.
NUM_THREADS: int = _TABLE["num_threads"]
# libcurl's receive buffer per request (its default is 16 KiB): fewer write callbacks per byte.
RECV_BUFFER_BYTES: int = _TABLE["recv_buffer_bytes"]

# Per attempt: TCP/TLS connect limit, and how long an attempt may go without a byte.
CONNECT_TIMEOUT_S: float = _TABLE["connect_timeout_s"]
STALL_TIMEOUT_S: float = _TABLE["stall_timeout_s"]

# Retry (RetryPolicy): attempts per request, full-jitter backoff caps, overall deadline.
MAX_ATTEMPTS: int = _TABLE["max_attempts"]
INITIAL_BACKOFF_S: float = _TABLE["initial_backoff_s"]
MAX_BACKOFF_S: float = _TABLE["max_backoff_s"]
RETRY_DEADLINE_S: float = _TABLE["deadline_s"]

# A bearer token is replaced this long before it expires.
TOKEN_REFRESH_MARGIN_S: float = _TABLE["token_refresh_margin_s"]

# Uploads (Uploader, and GCSStorageWriter's split into objects).
# Upload requests at once and their chunk bytes; bytes are read from caller memory, so this
# bounds work, not memory.
MAX_INFLIGHT_UPLOADS: int = _TABLE["max_inflight_uploads"]
UPLOAD_INFLIGHT_BYTES: int = _TABLE["upload_inflight_bytes"]
# Longest PUT, a multiple of 256 KiB (GCS's chunk rule) and larger than an object: one PUT each.
UPLOAD_CHUNK_BYTES: int = _TABLE["upload_chunk_bytes"]
# Writer: tensor bytes per data object; 16 MiB objects fill the upload slots within staging.
UPLOAD_OBJECT_BYTES: int = _TABLE["upload_object_bytes"]
# Writer: copied (serialized) bytes a rank holds before they are uploaded: the save's extra memory.
UPLOAD_STAGING_BYTES: int = _TABLE["upload_staging_bytes"]
# Writer: longest block of the CRC-32C block checksums; partial reads widen by < 1 block per end.
CHECKSUM_BLOCK_BYTES: int = _TABLE["checksum_block_bytes"]
