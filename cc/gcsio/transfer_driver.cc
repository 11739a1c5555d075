#include "cc/gcsio/transfer_driver.h"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "cc/gcsio/transfer_loop.h"

namespace gcsio {

TransferDriver::TransferDriver(DriverOptions options, TokenSource token_source)
    : options_(std::move(options)),
      tokens_(std::move(token_source), defaults::kTokenRefreshMarginS, defaults::kTokenUnknownTtlS),
      owner_pid_(getpid()) {
  if (options_.num_loops < 1) throw std::invalid_argument("num_threads must be >= 1");
  if (options_.max_inflight_requests < 1) {
    throw std::invalid_argument("max_inflight_requests must be >= 1");
  }
  if (options_.max_inflight_bytes < 1)
    throw std::invalid_argument("max_inflight_bytes must be >= 1");
  if (!(options_.stall_timeout_s > 0)) throw std::invalid_argument("stall_timeout_s must be > 0");
  options_.retry.Validate();
  GlobalCurlInitOnce();
}

TransferDriver::~TransferDriver() { Stop(); }

void TransferDriver::Stop() {
  if (getpid() != owner_pid_) {
    // A fork() child: the loop threads and their sockets belong to the parent. Joining would
    // hang and closing would disturb the parent's connections, so leak them.
    for (auto& l : loops_) l.release();
    loops_.clear();
    return;
  }
  std::vector<DriverJob> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped = queue_.TakeAll();
  }
  for (DriverJob& j : dropped) j.kind->Drop(j, /*closed=*/true);
  cv_.notify_all();
  WakeLoops();
  // Join all before destroying any: a stopping loop may still wake the others.
  for (auto& l : loops_) l->Join();
  loops_.clear();
}

void TransferDriver::CheckProcess() const {
  if (getpid() != owner_pid_) {
    throw std::runtime_error(options_.name + " was created in process " +
                             std::to_string(owner_pid_) +
                             " and cannot be used after fork(); create a new one here");
  }
}

void TransferDriver::StartLoopsOnce() {
  std::call_once(started_, [this] {
    num_loops_ = std::min(options_.num_loops, options_.max_inflight_requests);
    for (int i = 0; i < num_loops_; ++i) loops_.push_back(std::make_unique<TransferLoop>(this, i));
    // Threads start only once the loop list is complete: they read it to wake each other.
    for (auto& l : loops_) l->StartThread();
  });
}

void TransferDriver::Submit(std::vector<DriverJob> jobs) {
  CheckProcess();
  StartLoopsOnce();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw std::runtime_error(options_.noun + " is closed");
    const Clock::time_point now = Clock::now();
    for (DriverJob& j : jobs) {
      j.not_before = now;
      queue_.ready.push_back(std::move(j));
    }
  }
  cv_.notify_all();
  WakeLoops();
}

bool TransferDriver::Cancel(const TransferWork* work) {
  if (getpid() != owner_pid_) return false;
  std::vector<DriverJob> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = queue_.RemoveIf([work](const DriverJob& j) { return j.work.get() == work; });
  }
  for (DriverJob& j : dropped) j.kind->Drop(j, /*closed=*/false);
  WakeLoops();
  return true;
}

int TransferDriver::LoopCap(int loop) const {
  const int n = num_loops_;
  const int max = options_.max_inflight_requests;
  return max / n + (loop < max % n ? 1 : 0);
}

void TransferDriver::PromoteDueLocked(Clock::time_point now, std::vector<DriverJob>* dropped) {
  queue_.PromoteDue(now);
  while (!queue_.ready.empty() && queue_.ready.front().work->cancelled()) {
    dropped->push_back(std::move(queue_.ready.front()));
    queue_.ready.pop_front();
  }
}

TransferDriver::TakeVerdict TransferDriver::CanTakeLocked(int loop, int active) const {
  if (stopping_ || queue_.ready.empty() || active >= LoopCap(loop)) return TakeVerdict::kNo;
  // Spread queued work evenly over the loops so one thread does not take everything.
  const int n = num_loops_;
  const int total = inflight_requests_ + static_cast<int>(queue_.ready.size());
  if (active >= std::max(1, (total + n - 1) / n)) return TakeVerdict::kNo;
  const DriverJob& next = queue_.ready.front();
  const uint64_t bytes = next.kind->Bytes(next);
  if (inflight_requests_ > 0 && inflight_bytes_ + bytes > options_.max_inflight_bytes) {
    return TakeVerdict::kNoByteBudget;
  }
  return TakeVerdict::kYes;
}

bool TransferDriver::TakeJob(int loop, int active, DriverJob* job, uint64_t* bytes) {
  std::vector<DriverJob> dropped;
  bool taken = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    PromoteDueLocked(Clock::now(), &dropped);
    const TakeVerdict verdict = CanTakeLocked(loop, active);
    if (verdict == TakeVerdict::kYes) {
      *job = std::move(queue_.ready.front());
      queue_.ready.pop_front();
      *bytes = job->kind->Bytes(*job);
      ++inflight_requests_;
      inflight_bytes_ += *bytes;
      taken = true;
    } else if (verdict == TakeVerdict::kNoByteBudget) {
      // Only a byte-budget wait needs the other loops woken when budget frees up.
      bytes_blocked_ = true;
    }
  }
  for (DriverJob& j : dropped) j.kind->Drop(j, /*closed=*/false);
  return taken;
}

void TransferDriver::ReleaseAttempt(uint64_t bytes) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inflight_requests_;
    inflight_bytes_ -= bytes;
    wake = bytes_blocked_;
    bytes_blocked_ = false;
  }
  cv_.notify_all();
  if (wake) WakeLoops();
}

void TransferDriver::Settle(DriverJob job, const AttemptEnd& end, std::mt19937_64& rng) {
  RequestKind& kind = *job.kind;
  const Judgement j = kind.Judge(job, end);
  switch (j.action) {
    case Judgement::Action::kDone:
      return;
    case Judgement::Action::kNext:
      Requeue(std::move(job), 0);
      return;
    case Judgement::Action::kDrop:
      kind.Drop(job, /*closed=*/false);
      return;
    case Judgement::Action::kFail:
      stats_.AddFailure();
      kind.Fail(job, j.outcome, "");
      return;
    case Judgement::Action::kRetry:
      break;
  }
  if (job.work->cancelled()) {
    kind.Drop(job, /*closed=*/false);
    return;
  }
  const AttemptClock& clock = kind.Clock(job);
  const double elapsed = std::chrono::duration<double>(Clock::now() - clock.first_start).count();
  const RetryDecision next = DecideRetry(options_.retry, clock.attempts, elapsed, rng);
  if (!next.retry) {
    stats_.AddFailure();
    kind.Fail(job, j.outcome, next.why_not);
    return;
  }
  stats_.AddRetry(j.outcome.cause);
  kind.BeforeRetry(job, j.outcome);
  Requeue(std::move(job), next.backoff_s);
}

void TransferDriver::Requeue(DriverJob job, double delay_s) {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && !job.work->cancelled()) {
      job.not_before = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(delay_s));
      if (delay_s <= 0) {
        queue_.ready.push_front(std::move(job));
      } else {
        queue_.Delay(std::move(job));
      }
      queued = true;
    }
  }
  if (!queued) {
    job.kind->Drop(job, /*closed=*/false);
    return;
  }
  cv_.notify_all();
}

void TransferDriver::WaitForWork(int loop) {
  std::vector<DriverJob> dropped;
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      PromoteDueLocked(Clock::now(), &dropped);
      if (!dropped.empty() || stopping_ || CanTakeLocked(loop, 0) == TakeVerdict::kYes) break;
      if (!queue_.has_delayed()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, queue_.next_due());
      }
    }
  }
  for (DriverJob& j : dropped) j.kind->Drop(j, /*closed=*/false);
}

TransferDriver::Clock::duration TransferDriver::TimeToNextRetry(Clock::duration cap) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.has_delayed()) return cap;
  const Clock::duration left = queue_.next_due() - Clock::now();
  return std::clamp(left, Clock::duration::zero(), cap);
}

void TransferDriver::WakeLoops() {
  for (auto& l : loops_) l->Wake();
}

bool TransferDriver::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

}  // namespace gcsio
