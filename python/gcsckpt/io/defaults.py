"""Default tuning of RangeReader, and the measurement behind each value.

Measured with ``bazel run //bench:range_read -- --tune --rounds=3`` (gcsckpt.bench.range_read)
on the project's reference machine: 2 cores, Debian 12, libcurl 7.88.1, against LocalGCS, both
plain (nginx on loopback) and latency-modelled like GCS (30 ms to first byte, 200 MB/s per
stream: the per-stream figure in shared/DESIGN.md). Configurations took turns round by round
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
  ranges. 16 KiB kept amplification at 1.00-1.05 in the scattered cases (shared/DESIGN.md
  targets <= 1.02 for checkpoint loads, whose ranges are mostly adjacent and join at any gap).
- ``MAX_INFLIGHT_BYTES = 1 GiB``: a budget below max_inflight_requests x chunk_bytes caps
  throughput (64 MiB: 0.9 GB/s vs 1.9 GB/s modelled); 1 GiB never binds at the defaults
  (64 x 8 MiB = 512 MiB). Bytes go straight into caller buffers, so it bounds work, not memory.
- ``NUM_THREADS = min(4, CPUs)``: one curl multi thread topped out at ~1.4-1.6 GB/s on the
  modelled endpoint; two or four reached 1.9-2.2 GB/s (four gained nothing more on 2 cores).
- ``RECV_BUFFER_BYTES = 256 KiB``: libcurl's receive buffer per request (its default is 16 KiB);
  fewer, larger write callbacks per byte.
"""

import os

MAX_INFLIGHT_REQUESTS = 64
MAX_INFLIGHT_BYTES = 1 << 30
CHUNK_BYTES = 8 << 20
MIN_CHUNK_BYTES = 2 << 20
COALESCE_GAP_BYTES = 16 << 10
NUM_THREADS = min(4, os.cpu_count() or 1)
RECV_BUFFER_BYTES = 256 << 10
