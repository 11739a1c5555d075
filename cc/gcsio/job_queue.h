// The queue of work shared by the RangeReader and the Uploader: jobs ready to start
// (FIFO; retries that fall due go first) and retries waiting for their backoff to end (a
// min-heap by due time). Not thread-safe: the owner guards it with its own mutex.
#ifndef CC_GCSIO_JOB_QUEUE_H_
#define CC_GCSIO_JOB_QUEUE_H_

#include <algorithm>
#include <chrono>
#include <deque>
#include <iterator>
#include <utility>
#include <vector>

namespace gcsio {

// `Job` has a member `std::chrono::steady_clock::time_point not_before`: when a delayed job
// falls due.
template <typename Job>
class JobQueue {
 public:
  using Clock = std::chrono::steady_clock;

  std::deque<Job> ready;  // in start order

  // Whether a delayed job waits, and the earliest due time (only when one waits).
  bool has_delayed() const { return !delayed_.empty(); }
  Clock::time_point next_due() const { return delayed_.front().not_before; }

  // Holds `job` until job.not_before.
  void Delay(Job job) {
    delayed_.push_back(std::move(job));
    std::push_heap(delayed_.begin(), delayed_.end(), LaterDue);
  }

  // Moves the delayed jobs due by `now` to the front of `ready`.
  void PromoteDue(Clock::time_point now) {
    while (!delayed_.empty() && delayed_.front().not_before <= now) {
      std::pop_heap(delayed_.begin(), delayed_.end(), LaterDue);
      ready.push_front(std::move(delayed_.back()));  // retries go first
      delayed_.pop_back();
    }
  }

  // Removes and returns the jobs (ready ones first, then delayed) for which `of(job)` holds.
  template <typename Pred>
  std::vector<Job> RemoveIf(Pred of) {
    std::vector<Job> out;
    std::copy_if(ready.begin(), ready.end(), std::back_inserter(out), of);
    std::copy_if(delayed_.begin(), delayed_.end(), std::back_inserter(out), of);
    ready.erase(std::remove_if(ready.begin(), ready.end(), of), ready.end());
    delayed_.erase(std::remove_if(delayed_.begin(), delayed_.end(), of), delayed_.end());
    std::make_heap(delayed_.begin(), delayed_.end(), LaterDue);
    return out;
  }

  // Removes and returns every job (ready ones first, then delayed).
  std::vector<Job> TakeAll() {
    std::vector<Job> out(ready.begin(), ready.end());
    out.insert(out.end(), delayed_.begin(), delayed_.end());
    ready.clear();
    delayed_.clear();
    return out;
  }

 private:
  static bool LaterDue(const Job& a, const Job& b) { return a.not_before > b.not_before; }

  std::vector<Job> delayed_;  // min-heap by not_before
};

}  // namespace gcsio

#endif  // CC_GCSIO_JOB_QUEUE_H_
