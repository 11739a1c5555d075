"""Default tuning of RangeReader and Uploader, and the measurement behind each value.

The values live in one table shared with the C++ engine, ``cc/gcsio/defaults.h``, which the
extension exports as ``_gcsio.DEFAULTS``; this module names them for Python (RangeReader,
RetryPolicy, the token provider) and keeps the measurements. Timeouts and retry defaults come
from the same table: ``CONNECT_TIMEOUT_S`` (10 s) and ``STALL_TIMEOUT_S`` (30 s) per attempt,
``MAX_ATTEMPTS`` / ``INITIAL_BACKOFF_S`` / ``MAX_BACKOFF_S`` / ``RETRY_DEADLINE_S`` (see
RetryPolicy), and ``TOKEN_REFRESH_MARGIN_S`` (a token is refreshed 300 s before it expires).

Measured with ``bazel run //bench:range_read -- --tune --rounds=3`` (ckptbench.range_read)
on the project's reference machine: 2 cores, Debian 12, libcurl 7.88.1, against LocalGCS, both
plain (nginx on loopback) and latency-modelled like GCS (30 ms to first byte, 200 MB/s per
stream: about what one GCS stream carries, 200-250 MB/s). Configurations took turns round by round
with the raw parallel-GET ceiling (32 x 8 MiB GETs from a keep-alive Python pool: ~1.5-2.1 GB/s
modelled, ~2.7-3.8 GB/s plain). The machine was shared with other jobs (load average 4-10), so
single numbers move by +-25 %; the choices below held across repeated runs.

- ``MAX_INFLIGHT_REQUESTS = 64``: latency-bound reads scale with it: scattered 4 KiB ranges on
  the modelled endpoint ran at ~1,300-1,600 requests/s with 64 in flight against ~700-800 with 32
  (the bound is n / 30 ms); scattered 1 MiB ranges at 0.9 GB/s against 0.64. A 256 MiB read
  reached 1.7-2.2 GB/s (0.9-1.1 of the ceiling) at 64 and 32. On loopback all settings from 4
  up were within noise of the ceiling.
- ``CHUNK_BYTES = 8 MiB``: modelled, 64 in flight, 2-4 threads: 1.9-2.0 GB/s for 8 MiB chunks,
  1.7-2.2 for 4 MiB, 1.5-1.7 for 16 MiB, 1.2 for 32 MiB and 0.7 for 64 MiB (too few parallel
  streams), 1.3-1.6 for 2 MiB (first-byte latency dominates). It also splits a rank's ~100 MB
  read into enough requests to use the concurrency.
- ``MIN_CHUNK_BYTES = 2 MiB``: a small submit (fewer bytes than max_inflight_requests / 2 x
  chunk_bytes) is cut into shorter GETs so that about max_inflight_requests / 2 run at once.
  Modelled, 64 in flight, 8 ranges of 8 MiB: ~1.1 GB/s when cut to 2 MiB GETs against ~0.8 GB/s
  as 8 MiB GETs and ~0.9 GB/s as 1 MiB GETs (first-byte latency dominates again); 4 ranges of
  8 MiB: ~0.7 against ~0.5 GB/s. Cutting to fill all 64 slots instead of half turned a 256 MiB
  read into 4 MiB GETs and cost ~25 % there (2.2 vs 2.9 GB/s, 1.5x the CPU per byte).
- ``COALESCE_GAP_BYTES = 16 KiB``: joining ranges across larger holes paid little (modelled,
  scattered 64 KiB ranges: 88 MB/s at 16 KiB, 104 at 64 KiB with 7 % extra bytes, 150 at 1 MiB
  with 5.6x the bytes) and cost up to 75x bytes fetched per byte needed for scattered 4 KiB
  ranges. 16 KiB kept amplification at 1.00-1.05 in the scattered cases (the project targets
  <= 1.02 for checkpoint loads, whose ranges are mostly adjacent and join at any gap).
- ``MAX_INFLIGHT_BYTES = 1 GiB``: a budget below max_inflight_requests x chunk_bytes caps
  throughput (64 MiB: 0.9 GB/s vs 1.9 GB/s modelled); 1 GiB never binds at the defaults
  (64 x 8 MiB = 512 MiB). Bytes go straight into caller buffers, so it bounds work, not memory.
- ``NUM_THREADS = min(4, CPUs)``: one curl multi thread topped out at ~1.4-1.6 GB/s on the
  modelled endpoint; two or four reached 1.9-2.2 GB/s (four gained nothing more on 2 cores).
- ``RECV_BUFFER_BYTES = 256 KiB``: libcurl's receive buffer per request (its default is 16 KiB);
  fewer, larger write callbacks per byte.

Uploads (Uploader, GCSStorageWriter), measured with ``tools/bazel run //bench:save_path --
--state_mib=512 --rounds=3 --arms=uploader:16,uploader:32,uploader:64,objectstore`` (one process,
512 MiB of float32 tensors, plain LocalGCS, rounds interleaved, load average 6.5-8.7):

- ``UPLOAD_OBJECT_BYTES = 16 MiB``: ``dcp.save`` took 5.2-5.3 s with 16 MiB objects, 4.3-7.9 s
  with 32 MiB and 5.1-7.6 s with 64 MiB (the previous ObjectStore path: 11.9-16.8 s); the
  emulator's one upload thread (~100 MB/s) bounds all three, so the choice is the steadiest one,
  and the one whose objects fill ``MAX_INFLIGHT_UPLOADS`` within the staging budget
  (256 MiB / 16 MiB = 16): against GCS, where one stream carries ~200 MB/s, a rank's bandwidth
  grows with the uploads it has in flight.
- ``UPLOAD_STAGING_BYTES = 256 MiB``: serialized bytes a rank holds before they are uploaded;
  the save's peak RSS rose 13-271 MiB above the RSS before it (target: state + 10 % + 256 MiB).
- ``UPLOAD_CHUNK_BYTES = 64 MiB``: larger than an object, so an object is one PUT (a resumable
  session start and one PUT each: 64 requests for 32 objects); a multiple of 256 KiB.
- ``MAX_INFLIGHT_UPLOADS = 16``, ``UPLOAD_INFLIGHT_BYTES = 1 GiB``: requests at once and their
  chunk bytes; the bytes are read from staging memory, so this bounds work, not memory.
"""

from gcsckpt.io.extension import _gcsio

_TABLE = _gcsio.DEFAULTS

MAX_INFLIGHT_REQUESTS: int = _TABLE["max_inflight_requests"]
MAX_INFLIGHT_BYTES: int = _TABLE["max_inflight_bytes"]
CHUNK_BYTES: int = _TABLE["chunk_bytes"]
MIN_CHUNK_BYTES: int = _TABLE["min_chunk_bytes"]
COALESCE_GAP_BYTES: int = _TABLE["coalesce_gap_bytes"]
NUM_THREADS: int = _TABLE["num_threads"]  # min(4, CPUs)
RECV_BUFFER_BYTES: int = _TABLE["recv_buffer_bytes"]

CONNECT_TIMEOUT_S: float = _TABLE["connect_timeout_s"]
STALL_TIMEOUT_S: float = _TABLE["stall_timeout_s"]

MAX_ATTEMPTS: int = _TABLE["max_attempts"]
INITIAL_BACKOFF_S: float = _TABLE["initial_backoff_s"]
MAX_BACKOFF_S: float = _TABLE["max_backoff_s"]
RETRY_DEADLINE_S: float = _TABLE["deadline_s"]

TOKEN_REFRESH_MARGIN_S: float = _TABLE["token_refresh_margin_s"]

# Uploads (Uploader, and GCSStorageWriter's split into objects); measurements in
# gcsckpt.io.uploader's docstring.
MAX_INFLIGHT_UPLOADS: int = _TABLE["max_inflight_uploads"]
UPLOAD_INFLIGHT_BYTES: int = _TABLE["upload_inflight_bytes"]
UPLOAD_CHUNK_BYTES: int = _TABLE["upload_chunk_bytes"]
UPLOAD_OBJECT_BYTES: int = _TABLE["upload_object_bytes"]
UPLOAD_STAGING_BYTES: int = _TABLE["upload_staging_bytes"]
