// The transfer engine: a fixed pool of worker threads, each driving one curl multi handle with
// keep-alive connections, fed from one queue of fetches shared by all submitted batches.
#ifndef CC_GCSIO_ENGINE_H_
#define CC_GCSIO_ENGINE_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cc/gcsio/batch.h"
#include "cc/gcsio/defaults.h"
#include "cc/gcsio/job_queue.h"
#include "cc/gcsio/range_plan.h"
#include "cc/gcsio/read_stats.h"
#include "cc/gcsio/retry_policy.h"
#include "cc/gcsio/token_cache.h"

namespace gcsio {

// Defaults come from the one table, defaults.h.
struct EngineOptions {
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

class Engine {
 public:
  Engine(EngineOptions options, TokenSource token_source);
  ~Engine();  // cancels queued work, stops the workers
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Plans and queues the requests; returns at once. Throws std::invalid_argument for bad
  // ranges, std::runtime_error after fork() (the workers stayed in the parent). Fetches a token
  // first when one is due (callers must not hold Python's GIL).
  std::shared_ptr<Batch> Submit(std::vector<ObjectRef> objects, std::vector<RangeSpec> ranges,
                                std::vector<uint8_t*> dests);

  // Stops the batch's outstanding work; on return no destination of it is written any more.
  void Cancel(const std::shared_ptr<Batch>& batch);

  const EngineOptions& options() const { return options_; }
  ReadStats& stats() { return stats_; }

 private:
  class Worker;
  friend class Worker;
  using Clock = std::chrono::steady_clock;

  struct Job {
    std::shared_ptr<Batch> batch;
    uint32_t fetch;
    Clock::time_point not_before;
  };

  void StartWorkersOnce();
  // Hands the next job to worker `worker` that has `active` requests running, if its share and
  // the byte budget allow. `bytes` receives the job's reserved byte budget.
  bool TakeJob(int worker, int active, Job* job, uint64_t* bytes);
  // Frees the budget of an ended attempt.
  void ReleaseAttempt(uint64_t bytes);
  // Queues a retry `delay_s` seconds from now (dropped if the batch was cancelled). With
  // Worker::Judge, the only place a C++ request is retried.
  void Requeue(Job job, double delay_s);
  // Blocks an idle worker until a job may be taken or the engine stops.
  void WaitForWork(int worker);
  // Time until the earliest delayed retry is due (capped at `cap`).
  Clock::duration TimeToNextRetry(Clock::duration cap);
  void PromoteDueRetriesLocked(Clock::time_point now);
  enum class TakeVerdict { kYes, kNo, kNoByteBudget };
  TakeVerdict CanTakeLocked(int worker, int active) const;
  int WorkerCap(int worker) const;
  void WakeWorkers();
  bool stopping() const;

  const EngineOptions options_;
  ReadStats stats_;
  TokenCache tokens_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  JobQueue<Job> queue_;
  int inflight_requests_ = 0;
  uint64_t inflight_bytes_ = 0;
  bool bytes_blocked_ = false;  // a worker waits for byte budget
  bool stopping_ = false;
  std::once_flag started_;
  int num_workers_ = 0;    // fixed before any worker thread starts
  const pid_t owner_pid_;  // worker threads exist only in this process, not in a fork() child
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_ENGINE_H_
