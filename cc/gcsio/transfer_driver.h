// One transfer driver for every request kind (ranged GETs, upload requests), in the manner of
// one curl transport under every request: one queue of jobs (JobQueue), one request and byte
// budget, one token cache, one stats record and `num_loops` TransferLoop threads, each driving
// a curl multi handle on keep-alive connections. Each kind (request_kind.h) prepares its handles
// and judges its attempts; an ended attempt takes one path, Settle: the kind's Judgement, then
// for a retryable one DecideRetry (retry_policy.h) and Requeue. The RangeReader and
// the Uploader are this driver with their kind.
#ifndef CC_GCSIO_TRANSFER_DRIVER_H_
#define CC_GCSIO_TRANSFER_DRIVER_H_

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cc/gcsio/defaults.h"
#include "cc/gcsio/job_queue.h"
#include "cc/gcsio/request_kind.h"
#include "cc/gcsio/retry_policy.h"
#include "cc/gcsio/token_cache.h"
#include "cc/gcsio/transfer_stats.h"

namespace gcsio {

struct DriverOptions {
  std::string name = "TransferDriver";  // named in errors: "RangeReader", "Uploader"
  std::string noun = "driver";          // "<noun> is closed": "reader", "uploader"
  int num_loops = 1;                    // threads, each with one curl multi handle (>= 1)
  int max_inflight_requests = 1;        // attempts running at once, all loops (>= 1)
  uint64_t max_inflight_bytes = 1;      // sum of Bytes() of running attempts (one may exceed it)
  double stall_timeout_s = defaults::kStallTimeoutS;  // no byte this long: the attempt is retried
  RetryPolicy retry;
};

class TransferLoop;

class TransferDriver {
 public:
  TransferDriver(DriverOptions options, TokenSource token_source);
  ~TransferDriver();  // Stop()
  TransferDriver(const TransferDriver&) = delete;
  TransferDriver& operator=(const TransferDriver&) = delete;

  // Throws std::runtime_error in a fork() child (the loops stayed in the parent).
  void CheckProcess() const;
  // Fetches a token when one is due (fails early on a broken token source: throws what it threw).
  void RefreshToken() { tokens_.Get(); }
  // Queues `jobs` in order and starts the loops on first use. Throws std::runtime_error after
  // fork() or once stopped. Callers must not hold a lock a kind's Drop/Fail takes.
  void Submit(std::vector<DriverJob> jobs);
  // After `work` was marked cancelled: drops its queued jobs (each through its kind) and wakes
  // the loops, which end its running attempts. False in a fork() child (nothing runs there; the
  // queue is left alone).
  bool Cancel(const TransferWork* work);
  // Drops the queued jobs (closed), ends the running attempts, joins the loops; later Submits
  // throw. Idempotent; the kinds of queued jobs must outlive it.
  void Stop();

  TransferStats& stats() { return stats_; }
  const TransferStats& stats() const { return stats_; }
  const DriverOptions& options() const { return options_; }

 private:
  friend class TransferLoop;
  using Clock = std::chrono::steady_clock;
  enum class TakeVerdict { kYes, kNo, kNoByteBudget };

  // Loop side. Hands the next job to loop `loop` that has `active` attempts running, if its
  // share and the byte budget allow; `bytes` receives the job's reserved budget.
  bool TakeJob(int loop, int active, DriverJob* job, uint64_t* bytes);
  void ReleaseAttempt(uint64_t bytes);  // frees the budget of an ended attempt
  // The one path of an ended attempt: the kind's Judgement, then for a retryable outcome
  // DecideRetry and Requeue (the only place a C++ request is retried), else Fail or Drop.
  void Settle(DriverJob job, const AttemptEnd& end, std::mt19937_64& rng);
  // Queues `job` again `delay_s` seconds from now (at once, first, for <= 0); dropped through
  // its kind when the work was cancelled or the driver stops.
  void Requeue(DriverJob job, double delay_s);
  void WaitForWork(int loop);  // blocks an idle loop until a job may be taken or stop
  Clock::duration TimeToNextRetry(Clock::duration cap);  // earliest delayed retry, capped
  std::string Token() { return tokens_.Get(); }
  int LoopCap(int loop) const;  // the loop's share of max_inflight_requests
  long MaxConnects(int loop) const { return LoopCap(loop) + 4; }
  bool stopping() const;

  void StartLoopsOnce();
  void PromoteDueLocked(Clock::time_point now, std::vector<DriverJob>* dropped);
  TakeVerdict CanTakeLocked(int loop, int active) const;
  void WakeLoops();

  const DriverOptions options_;
  TransferStats stats_;
  TokenCache tokens_;
  const pid_t owner_pid_;  // loop threads exist only in this process, not in a fork() child

  mutable std::mutex mu_;
  std::condition_variable cv_;
  JobQueue<DriverJob> queue_;
  int inflight_requests_ = 0;
  uint64_t inflight_bytes_ = 0;
  bool bytes_blocked_ = false;  // a loop waits for byte budget
  bool stopping_ = false;
  std::once_flag started_;
  int num_loops_ = 0;  // fixed before any loop thread starts
  std::vector<std::unique_ptr<TransferLoop>> loops_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_TRANSFER_DRIVER_H_
