// Counters of one reader: requests, bytes, retries by cause, connection reuse, latency
// percentiles. Thread-safe; resettable.
#ifndef CC_GCSIO_READ_STATS_H_
#define CC_GCSIO_READ_STATS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace gcsio {

struct StatsSnapshot {
  uint64_t requests = 0;         // HTTP attempts started
  uint64_t bytes_received = 0;   // body bytes accepted from the network
  uint64_t bytes_delivered = 0;  // bytes written into caller destinations by finished fetches
  uint64_t retries = 0;
  std::map<std::string, uint64_t> retries_by_cause;
  uint64_t failures = 0;              // fetches that failed for good
  uint64_t whole_object_answers = 0;  // 200s with the whole object for a ranged GET
  uint64_t bytes_discarded = 0;       // body bytes of those outside the range asked for
  uint64_t connections_opened = 0;
  uint64_t connections_reused = 0;  // attempts that ran on an already open connection
  double latency_p50_s = 0, latency_p90_s = 0, latency_p99_s = 0;  // whole successful attempts
  double ttfb_p50_s = 0, ttfb_p90_s = 0, ttfb_p99_s = 0;           // time to first byte
};

class ReadStats {
 public:
  void AddRequest() { requests_.fetch_add(1, std::memory_order_relaxed); }
  void AddBytesReceived(uint64_t n) { bytes_received_.fetch_add(n, std::memory_order_relaxed); }
  void AddBytesDelivered(uint64_t n) { bytes_delivered_.fetch_add(n, std::memory_order_relaxed); }
  void AddRetry(const std::string& cause);
  void AddFailure() { failures_.fetch_add(1, std::memory_order_relaxed); }
  void AddWholeObjectAnswer() { whole_object_answers_.fetch_add(1, std::memory_order_relaxed); }
  void AddBytesDiscarded(uint64_t n) { bytes_discarded_.fetch_add(n, std::memory_order_relaxed); }
  // `new_connections` is CURLINFO_NUM_CONNECTS of one finished attempt.
  void AddConnections(long new_connections);
  void AddLatency(double total_s, double ttfb_s);

  StatsSnapshot Snapshot() const;
  void Reset();

 private:
  // Keeps a uniform sample of at most kMaxSamples values (reservoir sampling, Vitter's algorithm
  // R).
  static constexpr size_t kMaxSamples = 1 << 20;

  std::atomic<uint64_t> requests_{0}, bytes_received_{0}, bytes_delivered_{0}, failures_{0};
  std::atomic<uint64_t> connections_opened_{0}, connections_reused_{0};
  std::atomic<uint64_t> whole_object_answers_{0}, bytes_discarded_{0};
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> retries_by_cause_;
  std::vector<double> latency_, ttfb_;
  uint64_t samples_seen_ = 0;
  std::mt19937_64 rng_{12345};
};

// Linear-interpolated percentile (q in [0, 1]) of `values`; 0 for an empty list.
double Percentile(std::vector<double> values, double q);

}  // namespace gcsio

#endif  // CC_GCSIO_READ_STATS_H_
