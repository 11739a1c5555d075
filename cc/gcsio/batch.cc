#include "cc/gcsio/batch.h"

namespace gcsio {

Batch::Batch(std::vector<ObjectRef> objects, std::vector<RangeSpec> ranges,
             std::vector<uint8_t*> dests, Plan plan)
    : objects_(std::move(objects)),
      ranges_(std::move(ranges)),
      dests_(std::move(dests)),
      plan_(std::move(plan)),
      remaining_(plan_.pieces_per_request),
      request_failed_(ranges_.size(), false),
      open_fetches_(plan_.fetches.size()) {
  states_.reserve(plan_.fetches.size());
  for (const Fetch& f : plan_.fetches) {
    states_.push_back(FetchState{0, {}, {&f, &dests_, objects_[f.object_id].sums.get()}, 0});
  }
  pins_ = std::make_unique<std::atomic<int64_t>[]>(objects_.size());
  for (size_t i = 0; i < objects_.size(); ++i) pins_[i].store(objects_[i].generation);
  for (uint32_t r = 0; r < remaining_.size(); ++r) {
    if (remaining_[r] == 0) unreported_.push_back(r);  // zero-length: nothing to fetch
  }
}

void Batch::EndFetchLocked() {
  --open_fetches_;
  cv_.notify_all();
}

void Batch::FetchSucceeded(uint32_t fetch) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Piece& p : plan_.fetches[fetch].pieces) {
    if (--remaining_[p.request] == 0 && !request_failed_[p.request]) {
      unreported_.push_back(p.request);
    }
  }
  EndFetchLocked();
}

void Batch::FetchSucceededUpTo(uint32_t fetch, uint64_t object_size,
                               const RequestFailure& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  const Fetch& f = plan_.fetches[fetch];
  for (const Piece& p : f.pieces) {
    if (f.offset + p.fetch_offset + p.length <= object_size) {
      if (--remaining_[p.request] == 0 && !request_failed_[p.request]) {
        unreported_.push_back(p.request);
      }
    } else if (!request_failed_[p.request]) {
      request_failed_[p.request] = true;
      failures_.push_back(failure);
      failures_.back().request = p.request;
    }
  }
  EndFetchLocked();
}

void Batch::FetchFailed(uint32_t fetch, const RequestFailure& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Piece& p : plan_.fetches[fetch].pieces) {
    if (request_failed_[p.request]) continue;
    request_failed_[p.request] = true;
    failures_.push_back(failure);
    failures_.back().request = p.request;
  }
  EndFetchLocked();
}

std::vector<std::pair<ObjectRef, int64_t>> Batch::Generations() const {
  std::vector<std::pair<ObjectRef, int64_t>> out;
  out.reserve(objects_.size());
  for (size_t i = 0; i < objects_.size(); ++i) out.emplace_back(objects_[i], pins_[i].load());
  return out;
}

void Batch::FetchDropped(uint32_t) {
  std::lock_guard<std::mutex> lock(mu_);
  EndFetchLocked();
}

Batch::Progress Batch::NextCompleted(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [this] {
    return !unreported_.empty() || !failures_.empty() || reported_ == remaining_.size() ||
           (open_fetches_ == 0 && cancelled());
  };
  Progress p;
  if (timeout_s < 0) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready)) {
    p.timed_out = true;
    return p;
  }
  p.failed = !failures_.empty();
  if (p.failed) return p;
  p.completed.assign(unreported_.begin(), unreported_.end());
  reported_ += unreported_.size();
  unreported_.clear();
  return p;
}

void Batch::WaitFinished() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return open_fetches_ == 0; });
}

bool Batch::WaitFinishedFor(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                      [this] { return open_fetches_ == 0; });
}

bool Batch::Finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_fetches_ == 0;
}

std::vector<RequestFailure> Batch::Failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

}  // namespace gcsio
