// The range reader (RangeReader): its options, and the TransferDriver (num_threads loops, one queue
// of fetches shared by all submitted batches) running the ranged-GET kind (range_kind.h).
#ifndef CC_GCSIO_RANGE_READER_H_
#define CC_GCSIO_RANGE_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cc/gcsio/batch.h"
#include "cc/gcsio/defaults.h"
#include "cc/gcsio/range_kind.h"
#include "cc/gcsio/range_plan.h"
#include "cc/gcsio/retry_policy.h"
#include "cc/gcsio/token_cache.h"
#include "cc/gcsio/transfer_driver.h"

namespace gcsio {

// Defaults come from the one table, defaults.h.
struct RangeReaderOptions {
  std::string endpoint = "https://storage.googleapis.com";
  // HTTP requests running at once (all threads).
  int max_inflight_requests = defaults::kMaxInflightRequests;
  // Sum of bytes still wanted by running requests.
  uint64_t max_inflight_bytes = defaults::kMaxInflightBytes;
  // Worker threads, each with one curl multi handle.
  int num_threads = defaults::NumThreads();
  PlanOptions plan;
  RetryPolicy retry;
  double connect_timeout_s = defaults::kConnectTimeoutS;
  double stall_timeout_s = defaults::kStallTimeoutS;    // no byte this long: the attempt is retried
  long recv_buffer_bytes = defaults::kRecvBufferBytes;  // libcurl receive buffer per request
  std::string credential_description = "none";

  // Throws std::invalid_argument naming the bad option.
  void Validate() const;
};

// The range reader: a TransferDriver running the ranged-GET kind (RangeKind).
class RangeReader {
 public:
  RangeReader(RangeReaderOptions options, TokenSource token_source);
  ~RangeReader();  // cancels queued work, stops the loops
  RangeReader(const RangeReader&) = delete;
  RangeReader& operator=(const RangeReader&) = delete;

  // Plans and queues the requests; returns at once. Throws std::invalid_argument for bad
  // ranges, std::runtime_error after fork() (the loops stayed in the parent). Fetches a token
  // first when one is due (callers must not hold Python's GIL).
  std::shared_ptr<Batch> Submit(std::vector<ObjectRef> objects, std::vector<RangeSpec> ranges,
                                std::vector<uint8_t*> dests);

  // Stops the batch's outstanding work; on return no destination of it is written any more.
  void Cancel(const std::shared_ptr<Batch>& batch);

  const RangeReaderOptions& options() const { return options_; }
  TransferStats& stats() { return driver_.stats(); }

 private:
  const RangeReaderOptions options_;
  TransferDriver driver_;
  RangeKind kind_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_RANGE_READER_H_
