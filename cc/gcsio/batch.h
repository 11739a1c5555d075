// One submitted set of requests: its plan, per-fetch retry state, and the completion / failure
// bookkeeping that callers wait on.
#ifndef CC_GCSIO_BATCH_H_
#define CC_GCSIO_BATCH_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cc/gcsio/block_sums.h"
#include "cc/gcsio/range_plan.h"
#include "cc/gcsio/request_kind.h"
#include "cc/gcsio/scatter_writer.h"

namespace gcsio {

struct ObjectRef {
  std::string bucket;
  std::string object;
  int64_t generation = 0;  // the generation the caller wants read; 0: the first answer's
  // The object's block checksums (block_sums.h), or null: every block read is checked.
  std::shared_ptr<const BlockSums> sums;
};

struct RequestFailure {
  uint32_t request = 0;  // index into the submitted requests
  long status = 0;       // HTTP status of the last attempt, 0 if none arrived
  std::string error;
  int attempts = 0;
  std::string cause;            // e.g. "connection_reset", "beyond_end", kGenerationChanged
  uint64_t bytes_received = 0;  // body bytes of the failed GET that arrived (all attempts)
  uint64_t offset_reached = 0;  // object offset up to which that GET's bytes arrived
  int64_t pinned_generation = 0;
  int64_t seen_generation = 0;
  // cause kChecksumMismatch: the block that failed its check again after one re-fetch.
  ChecksumMismatch checksum;
};

// Mutable state of one fetch; only the thread running or queueing it touches it.
struct FetchState {
  uint64_t received = 0;  // body bytes already written; a retry asks only for the rest
  AttemptClock clock;
  ScatterWriter writer;
  int checksum_retries = 0;  // re-fetches after a block failed its CRC-32C check
};

class Batch : public TransferWork {
 public:
  // `dests[i]` receives request i and must stay valid until the batch is finished.
  Batch(std::vector<ObjectRef> objects, std::vector<RangeSpec> ranges, std::vector<uint8_t*> dests,
        Plan plan);
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  size_t num_fetches() const { return plan_.fetches.size(); }
  const Fetch& fetch(uint32_t i) const { return plan_.fetches[i]; }
  FetchState& state(uint32_t i) { return states_[i]; }
  const ObjectRef& object_of(uint32_t fetch) const {
    return objects_[plan_.fetches[fetch].object_id];
  }
  const std::atomic<bool>& cancelled_flag() const { return cancelled_; }
  bool cancelled() const override { return cancelled_.load(std::memory_order_relaxed); }
  uint64_t remaining_bytes(uint32_t fetch) const {
    return plan_.fetches[fetch].length - states_[fetch].received;
  }
  // The generation every GET of the fetch's object is pinned to (0 until known). Set from the
  // caller's ObjectRef, or by the first answer naming one (compare-and-swap: every later answer,
  // on any thread, is checked against the same value), so one batch never mixes versions.
  std::atomic<int64_t>& pin_of(uint32_t fetch) { return pins_[plan_.fetches[fetch].object_id]; }
  // (object, pinned generation or 0) for every object of the batch.
  std::vector<std::pair<ObjectRef, int64_t>> Generations() const;

  // Range-kind side: each fetch ends exactly once, by one of these.
  void FetchSucceeded(uint32_t fetch);
  // The object ended at `object_size`, inside the fetch: requests whose pieces all lie below it
  // succeed, the others fail with `failure` (its request index is filled in).
  void FetchSucceededUpTo(uint32_t fetch, uint64_t object_size, const RequestFailure& failure);
  // Every request the fetch serves fails with `failure` (its request index is filled in).
  void FetchFailed(uint32_t fetch, const RequestFailure& failure);
  void FetchDropped(uint32_t fetch);  // cancelled or shut down before finishing
  void MarkCancelled() { cancelled_.store(true); }

  // Caller side (never while holding a lock the reader needs, e.g. Python's GIL).
  struct Progress {
    std::vector<uint32_t> completed;  // newly complete request indices
    bool failed = false;              // some request failed for good
    bool timed_out = false;
  };
  // Blocks until a request completes unreported, one fails, or all were reported (then
  // `completed` is empty). timeout_s < 0 waits without limit.
  Progress NextCompleted(double timeout_s);
  void WaitFinished();                     // until every fetch has ended
  bool WaitFinishedFor(double timeout_s);  // false if fetches are still open after timeout_s
  bool Finished() const;
  std::vector<RequestFailure> Failures() const;
  size_t num_requests() const { return remaining_.size(); }

 private:
  void EndFetchLocked();

  const std::vector<ObjectRef> objects_;
  const std::vector<RangeSpec> ranges_;
  const std::vector<uint8_t*> dests_;
  const Plan plan_;
  std::vector<FetchState> states_;
  std::unique_ptr<std::atomic<int64_t>[]> pins_;  // per object
  std::atomic<bool> cancelled_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint32_t> remaining_;  // pieces still missing per request
  std::deque<uint32_t> unreported_;
  size_t reported_ = 0;
  std::vector<bool> request_failed_;
  std::vector<RequestFailure> failures_;
  size_t open_fetches_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_BATCH_H_
