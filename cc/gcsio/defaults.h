// The one table of the C++ defaults (range reader and uploader). RangeReaderOptions, PlanOptions,
// UploaderOptions, RetryPolicy and the token caches take their defaults from here; the pybind11
// module exports the table as `_gcsio.DEFAULTS`, and python/gcsckpt/io/defaults.py takes its
// values from that export, so the two languages cannot disagree. Each value has a one-line
// reason; the measurements behind the tuning values are in docs/measurements.md, "Tuning
// constants".
#ifndef CC_GCSIO_DEFAULTS_H_
#define CC_GCSIO_DEFAULTS_H_

#include <cstdint>

namespace gcsio {
namespace defaults {

// Range reader tuning (//bench:range_read -- --tune).
// HTTP requests at once (all threads): latency-bound reads scale with it.
inline constexpr int kMaxInflightRequests = 64;
// Bytes wanted by running requests: above requests x chunk, so it never caps throughput.
inline constexpr uint64_t kMaxInflightBytes = 1ULL << 30;
// Longest single GET: amortizes first-byte latency and still leaves parallel streams.
inline constexpr uint64_t kChunkBytes = 8ULL << 20;
// Shortest cut of a small submit, so that about half the request slots run at once.
inline constexpr uint64_t kMinChunkBytes = 2ULL << 20;
// Largest hole joined into one GET; larger holes fetch many bytes nobody needs.
inline constexpr uint64_t kCoalesceGapBytes = 16ULL << 10;
// Worker threads: min(this, CPUs); one curl multi thread tops out below what two carry.
inline constexpr int kMaxNumThreads = 4;
// libcurl receive buffer per request (its default is 16 KiB): fewer write callbacks per byte.
inline constexpr long kRecvBufferBytes = 256L << 10;

// Uploads (uploader.h) and the DCP writer's data objects (//bench:save_path). 16 MiB objects
// under a 256 MiB staging budget keep up to 16 uploads of a rank in flight, as many as
// kMaxInflightUploads.
inline constexpr int kMaxInflightUploads = 16;                // upload requests at once
inline constexpr uint64_t kUploadInflightBytes = 1ULL << 30;  // chunk bytes of running PUTs
// Longest PUT: a 256 KiB multiple (GCS's chunk rule), larger than an object, so one PUT each.
inline constexpr uint64_t kUploadChunkBytes = 64ULL << 20;
inline constexpr uint64_t kUploadObjectBytes = 16ULL << 20;  // writer: tensor bytes per object
// Writer: the longest block of a data object's CRC-32C block checksums (block_sums.h); items are
// blocks of their own below it. A partial read widens by less than one block at each end, and
// .metadata grows by 12 bytes per block (docs/measurements.md, "Block checksums").
inline constexpr uint64_t kChecksumBlockBytes = 1ULL << 20;
inline constexpr uint64_t kUploadStagingBytes = 256ULL << 20;  // writer: serialized bytes held

// Timeouts (seconds).
inline constexpr double kConnectTimeoutS = 10.0;  // TCP/TLS connect limit per attempt
inline constexpr double kStallTimeoutS = 30.0;    // an attempt with no byte this long is retried

// Retry policy (see retry_policy.h).
inline constexpr int kMaxAttempts = 6;            // per fetch, the first one included
inline constexpr double kInitialBackoffS = 0.05;  // cap of the first backoff draw
inline constexpr double kMaxBackoffS = 2.0;       // cap of every backoff draw
inline constexpr double kRetryDeadlineS = 120.0;  // no new attempt this long after the first

// Bearer tokens (see token_cache.h): a token is replaced this long before its expiry (or at half
// its lifetime if that is shorter); one without a known expiry is kept this long.
inline constexpr double kTokenRefreshMarginS = 300.0;
inline constexpr double kTokenUnknownTtlS = 60.0;

// min(kMaxNumThreads, online CPUs), at least 1.
int NumThreads();

}  // namespace defaults
}  // namespace gcsio

#endif  // CC_GCSIO_DEFAULTS_H_
