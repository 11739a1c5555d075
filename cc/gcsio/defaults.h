// The one table of the C++ defaults (range reader and uploader). EngineOptions, PlanOptions,
// UploaderOptions, RetryPolicy and the token caches take their defaults from here; the pybind11
// module exports the table as `_gcsio.DEFAULTS`, and python/gcsckpt/io/defaults.py (which
// documents the measurement behind each tuning value) takes its values from that export, so the
// two languages cannot disagree.
#ifndef CC_GCSIO_DEFAULTS_H_
#define CC_GCSIO_DEFAULTS_H_

#include <cstdint>

namespace gcsio {
namespace defaults {

// Tuning (measured with //bench:range_read, see python/gcsckpt/io/defaults.py).
inline constexpr int kMaxInflightRequests = 64;             // HTTP requests at once (all threads)
inline constexpr uint64_t kMaxInflightBytes = 1ULL << 30;   // bytes wanted by running requests
inline constexpr uint64_t kChunkBytes = 8ULL << 20;         // longest single GET (bytes)
inline constexpr uint64_t kMinChunkBytes = 2ULL << 20;      // shortest cut of a small submit
inline constexpr uint64_t kCoalesceGapBytes = 16ULL << 10;  // largest hole joined into one GET
inline constexpr int kMaxNumThreads = 4;                    // worker threads: min(this, CPUs)
inline constexpr long kRecvBufferBytes = 256L << 10;        // libcurl receive buffer per request

// Uploads (uploader.h) and the DCP writer's data objects. Measured with //bench:save_path (one
// process, 512 MiB of float32 tensors, LocalGCS, rounds interleaved, load average 6.5-8.7; the
// figures are in python/gcsckpt/io/uploader.py): 16 MiB objects 5.2-5.3 s per save, 32 MiB
// 4.3-7.9 s, 64 MiB 5.1-7.6 s, the ObjectStore path 11.9-16.8 s; the emulator's one upload
// thread bounds all of them (~100 MB/s). 16 MiB objects under a 256 MiB staging budget keep up
// to 16 uploads of a rank in flight, as many as kMaxInflightUploads.
inline constexpr int kMaxInflightUploads = 16;                 // upload requests at once
inline constexpr uint64_t kUploadInflightBytes = 1ULL << 30;   // chunk bytes of running PUTs
inline constexpr uint64_t kUploadChunkBytes = 64ULL << 20;     // longest PUT (256 KiB multiple)
inline constexpr uint64_t kUploadObjectBytes = 16ULL << 20;    // writer: tensor bytes per object
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
