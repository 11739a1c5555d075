#include "cc/gcsio/engine.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cc/gcsio/engine_worker.h"

namespace gcsio {
namespace {}  // namespace

void EngineOptions::Validate() const {
  if (max_inflight_requests < 1) throw std::invalid_argument("max_inflight_requests must be >= 1");
  if (max_inflight_bytes < 1) throw std::invalid_argument("max_inflight_bytes must be >= 1");
  if (num_threads < 1) throw std::invalid_argument("num_threads must be >= 1");
  if (plan.chunk_bytes < 1) throw std::invalid_argument("chunk_bytes must be >= 1");
  if (plan.min_chunk_bytes < 1) throw std::invalid_argument("min_chunk_bytes must be >= 1");
  if (!(connect_timeout_s > 0)) throw std::invalid_argument("connect_timeout_s must be > 0");
  if (!(stall_timeout_s > 0)) throw std::invalid_argument("stall_timeout_s must be > 0");
  if (recv_buffer_bytes < 1024) throw std::invalid_argument("recv_buffer_bytes must be >= 1024");
  retry.Validate();
}

Engine::Engine(EngineOptions options, TokenSource token_source)
    : options_(std::move(options)),
      tokens_(std::move(token_source), defaults::kTokenRefreshMarginS, defaults::kTokenUnknownTtlS),
      owner_pid_(getpid()) {
  options_.Validate();
  GlobalCurlInitOnce();
}

Engine::~Engine() {
  if (getpid() != owner_pid_) {
    // A fork() child: the worker threads and their sockets belong to the parent. Joining
    // would hang and closing would disturb the parent's connections, so leak them.
    for (auto& w : workers_) w.release();
    return;
  }
  std::vector<Job> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped = queue_.TakeAll();
  }
  for (Job& j : dropped) j.batch->FetchDropped(j.fetch);
  cv_.notify_all();
  WakeWorkers();
  // Join all before destroying any: a stopping worker may still wake the others.
  for (auto& w : workers_) w->Join();
  workers_.clear();
}

void Engine::StartWorkersOnce() {
  std::call_once(started_, [this] {
    num_workers_ = std::min(options_.num_threads, options_.max_inflight_requests);
    for (int i = 0; i < num_workers_; ++i) workers_.push_back(std::make_unique<Worker>(this, i));
    // Threads start only once the worker list is complete: they read it to wake each other.
    for (auto& w : workers_) w->StartThread();
  });
}

std::shared_ptr<Batch> Engine::Submit(std::vector<ObjectRef> objects, std::vector<RangeSpec> ranges,
                                      std::vector<uint8_t*> dests) {
  if (getpid() != owner_pid_) {
    throw std::runtime_error("RangeReader was created in process " + std::to_string(owner_pid_) +
                             " and cannot be used after fork(); create a new one here");
  }
  Plan plan = PlanFetches(ranges, options_.plan);
  tokens_.Get();  // fail early on a broken token provider; refreshes a token that is due
  auto batch = std::make_shared<Batch>(std::move(objects), std::move(ranges), std::move(dests),
                                       std::move(plan));
  StartWorkersOnce();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw std::runtime_error("reader is closed");
    const Clock::time_point now = Clock::now();
    for (uint32_t i = 0; i < batch->num_fetches(); ++i) queue_.ready.push_back(Job{batch, i, now});
  }
  cv_.notify_all();
  WakeWorkers();
  return batch;
}

void Engine::Cancel(const std::shared_ptr<Batch>& batch) {
  batch->MarkCancelled();
  if (getpid() != owner_pid_) return;  // fork() child: no worker here will ever finish it
  std::vector<Job> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = queue_.RemoveIf([&batch](const Job& j) { return j.batch == batch; });
  }
  for (Job& j : dropped) j.batch->FetchDropped(j.fetch);
  WakeWorkers();
  batch->WaitFinished();
}

int Engine::WorkerCap(int worker) const {
  const int n = num_workers_;
  const int max = options_.max_inflight_requests;
  return max / n + (worker < max % n ? 1 : 0);
}

void Engine::PromoteDueRetriesLocked(Clock::time_point now) {
  queue_.PromoteDue(now);
  while (!queue_.ready.empty() && queue_.ready.front().batch->cancelled()) {
    queue_.ready.front().batch->FetchDropped(queue_.ready.front().fetch);
    queue_.ready.pop_front();
  }
}

Engine::TakeVerdict Engine::CanTakeLocked(int worker, int active) const {
  if (stopping_ || queue_.ready.empty() || active >= WorkerCap(worker)) return TakeVerdict::kNo;
  // Spread queued work evenly over the workers so one thread does not take everything.
  const int n = num_workers_;
  const int total = inflight_requests_ + static_cast<int>(queue_.ready.size());
  if (active >= std::max(1, (total + n - 1) / n)) return TakeVerdict::kNo;
  const Job& next = queue_.ready.front();
  const uint64_t bytes = next.batch->remaining_bytes(next.fetch);
  if (inflight_requests_ > 0 && inflight_bytes_ + bytes > options_.max_inflight_bytes) {
    return TakeVerdict::kNoByteBudget;
  }
  return TakeVerdict::kYes;
}

bool Engine::TakeJob(int worker, int active, Job* job, uint64_t* bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  PromoteDueRetriesLocked(Clock::now());
  const TakeVerdict verdict = CanTakeLocked(worker, active);
  if (verdict != TakeVerdict::kYes) {
    // Only a byte-budget wait needs the other workers woken when budget frees up.
    if (verdict == TakeVerdict::kNoByteBudget) bytes_blocked_ = true;
    return false;
  }
  *job = std::move(queue_.ready.front());
  queue_.ready.pop_front();
  *bytes = job->batch->remaining_bytes(job->fetch);
  ++inflight_requests_;
  inflight_bytes_ += *bytes;
  return true;
}

void Engine::ReleaseAttempt(uint64_t bytes) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inflight_requests_;
    inflight_bytes_ -= bytes;
    wake = bytes_blocked_;
    bytes_blocked_ = false;
  }
  cv_.notify_all();
  if (wake) WakeWorkers();
}

void Engine::Requeue(Job job, double delay_s) {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && !job.batch->cancelled()) {
      job.not_before = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(delay_s));
      queue_.Delay(job);
      queued = true;
    }
  }
  if (!queued) {
    job.batch->FetchDropped(job.fetch);
    return;
  }
  cv_.notify_all();
}

void Engine::WaitForWork(int worker) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    PromoteDueRetriesLocked(Clock::now());
    if (stopping_ || CanTakeLocked(worker, 0) == TakeVerdict::kYes) return;
    if (!queue_.has_delayed()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, queue_.next_due());
    }
  }
}

Engine::Clock::duration Engine::TimeToNextRetry(Clock::duration cap) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.has_delayed()) return cap;
  const Clock::duration left = queue_.next_due() - Clock::now();
  return std::clamp(left, Clock::duration::zero(), cap);
}

void Engine::WakeWorkers() {
  for (auto& w : workers_) w->Wake();
}

bool Engine::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

}  // namespace gcsio
