// Resumable uploads (GCS JSON API) of caller memory, many in flight on one TransferDriver loop.
//
// An upload's bytes are spans of caller memory (UploadPayload; the object is their
// concatenation). POST {endpoint}/upload/storage/v1/b/B/o?uploadType=resumable&name=O
// [&ifGenerationMatch=G] -> session URL; then PUTs of at most chunk_bytes
// (`Content-Range: bytes a-b/total`) read straight from the caller's memory; 308 +
// `Range: bytes=0-K` means the session holds K + 1 bytes; the final 200/201's object resource
// is checked for size, generation and crc32c (computed here, crc32c.h).
//
// As the driver's upload request kind (upload_kind.h), a retryable failure is retried by the
// same DecideRetry path as a ranged GET; attempts and the deadline restart once a chunk is
// committed. A retried chunk first asks the session what it holds (`bytes */total`) and
// resumes there; a 404/410 session starts again from byte 0 (one attempt); HTTP 412 fails
// with kPreconditionFailed; other 4xx fail at once.
#ifndef CC_GCSIO_UPLOADER_H_
#define CC_GCSIO_UPLOADER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "cc/gcsio/defaults.h"
#include "cc/gcsio/request_kind.h"
#include "cc/gcsio/retry_policy.h"
#include "cc/gcsio/token_cache.h"
#include "cc/gcsio/transfer_driver.h"
#include "cc/gcsio/transfer_stats.h"
#include "cc/gcsio/upload_payload.h"
#include "cc/gcsio/upload_transfer.h"

namespace gcsio {

// Defaults come from the one table, defaults.h.
struct UploaderOptions {
  std::string endpoint = "https://storage.googleapis.com";
  int max_inflight_requests = defaults::kMaxInflightUploads;     // upload requests at once
  uint64_t max_inflight_bytes = defaults::kUploadInflightBytes;  // chunk bytes of running PUTs
  uint64_t chunk_bytes = defaults::kUploadChunkBytes;  // longest PUT; a multiple of 256 KiB
  RetryPolicy retry;
  double connect_timeout_s = defaults::kConnectTimeoutS;
  double stall_timeout_s = defaults::kStallTimeoutS;  // no byte either way this long: retried
  std::string credential_description = "none";

  // Throws std::invalid_argument naming the bad option.
  void Validate() const;
};

struct UploadSpec {
  std::string bucket;
  std::string object;
  // The object's bytes: the concatenation of caller spans, each of which must stay valid and
  // unchanged until the upload finished (a single buffer is one span).
  UploadPayload payload;
  int64_t if_generation_match = -1;  // -1: none; 0: only if absent; G: only over generation G
  // Block starts (bytes, ascending from 0, block_sums.h) whose CRC-32C each is returned in
  // UploadResult::block_crcs; empty: none.
  std::vector<uint64_t> block_starts;
};

// What became of one upload.
struct UploadResult {
  bool ok = false;
  int64_t generation = 0;  // of the new object
  uint64_t size = 0;
  uint32_t crc32c = 0;               // of the bytes sent (equal to the server's when ok)
  std::vector<uint32_t> block_crcs;  // CRC-32C of each block of UploadSpec::block_starts
  int requests = 0;                  // HTTP requests made for it
  int attempts = 0;                  // attempts of the request it ended on
  int retries = 0;                   // failed attempts that were retried
  int status_queries = 0;            // `bytes */total` queries
  int restarts = 0;                  // new sessions after an expired one
  uint64_t resent_bytes = 0;         // bytes sent again after a retry (already sent once)
  uint64_t committed = 0;            // bytes the server confirmed holding (offset reached)
  long status = 0;                   // HTTP status of the last answer, 0 if none
  std::string cause;  // failure: e.g. kPreconditionFailed, kCrc32cMismatch, "http_503"
  std::string error;  // failure: names gs://bucket/object, offset, attempts; no token
};

class UploadKind;

// One submitted upload.
class Upload : public TransferWork {
 public:
  explicit Upload(UploadSpec spec) : spec_(std::move(spec)) {}
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  const UploadSpec& spec() const { return spec_; }
  bool Finished() const;
  // Blocks up to `timeout_s` (< 0: forever); true once finished.
  bool WaitFor(double timeout_s) const;
  UploadResult Result() const;  // meaningful once finished
  bool cancelled() const override { return cancelled_.load(std::memory_order_relaxed); }
  void MarkCancelled() { cancelled_.store(true); }

 private:
  friend class UploadKind;
  void Finish(UploadResult result);

  const UploadSpec spec_;
  std::atomic<bool> cancelled_{false};
  // Loop-thread state.
  UploadStep step_ = UploadStep::kStart;
  std::string session_url_;
  uint64_t committed_ = 0;
  uint64_t sent_high_ = 0;  // highest offset ever sent (to count re-sent bytes)
  AttemptClock clock_;      // of the current request
  // When the upload's first request began: session restarts stop at the retry deadline from
  // here (and at max_attempts sessions), so an endpoint that loses every session cannot keep
  // the upload going.
  std::chrono::steady_clock::time_point first_start_;
  UploadResult progress_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool finished_ = false;
  UploadResult result_;
};

class Uploader {
 public:
  Uploader(UploaderOptions options, TokenSource token_source);
  ~Uploader();  // cancels what is queued or running, stops the loop
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  // Computes the CRC-32C of the bytes, chained over the spans (callers must not hold Python's GIL),
  // fetches a token when one is due, queues the upload and returns at once. Throws
  // std::invalid_argument for an empty bucket/object, std::runtime_error after fork() or once
  // closed.
  std::shared_ptr<Upload> Submit(UploadSpec spec);
  // Stops the upload; on return no request of it reads the caller's memory any more. A
  // finished upload is left as it is.
  void Cancel(const std::shared_ptr<Upload>& upload);

  UploadStatsSnapshot Stats() const { return driver_.stats().Snapshot(); }
  const UploaderOptions& options() const { return options_; }

 private:
  const UploaderOptions options_;
  TransferDriver driver_;
  std::unique_ptr<UploadKind> kind_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_UPLOADER_H_
