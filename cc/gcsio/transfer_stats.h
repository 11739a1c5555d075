// Counters of one TransferDriver, the one stats record of every request kind: requests, bytes
// either way, retries by cause, failures, connection reuse, latency percentiles, and the
// kind-specific counts (whole-object answers of GETs; status queries and restarts of uploads).
// Thread-safe; resettable.
#ifndef CC_GCSIO_TRANSFER_STATS_H_
#define CC_GCSIO_TRANSFER_STATS_H_

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
  uint64_t bytes_received = 0;   // GET body bytes accepted from the network
  uint64_t bytes_delivered = 0;  // bytes written into caller destinations by finished fetches
  uint64_t bytes_sent = 0;       // upload body bytes read from caller memory
  uint64_t retries = 0;
  std::map<std::string, uint64_t> retries_by_cause;
  uint64_t failures = 0;              // requests (fetches, uploads) that failed for good
  uint64_t uploads_done = 0;          // uploads that finished ok
  uint64_t status_queries = 0;        // upload `bytes */total` queries
  uint64_t restarts = 0;              // upload sessions begun again after an expired one
  uint64_t whole_object_answers = 0;  // 200s with the whole object for a ranged GET
  uint64_t bytes_discarded = 0;       // body bytes of those outside the range asked for
  uint64_t connections_opened = 0;
  uint64_t connections_reused = 0;  // attempts that ran on an already open connection
  double latency_p50_s = 0, latency_p90_s = 0, latency_p99_s = 0;  // whole successful GETs
  double ttfb_p50_s = 0, ttfb_p90_s = 0, ttfb_p99_s = 0;           // time to first byte
};

// The uploader's view of the same record (its dict names a subset of the fields).
using UploadStatsSnapshot = StatsSnapshot;

class TransferStats {
 public:
  void AddRequest() { Add(requests_, 1); }
  void AddBytesReceived(uint64_t n) { Add(bytes_received_, n); }
  void AddBytesDelivered(uint64_t n) { Add(bytes_delivered_, n); }
  void AddBytesSent(uint64_t n) { Add(bytes_sent_, n); }
  void AddRetry(const std::string& cause);
  void AddFailure() { Add(failures_, 1); }
  void AddUploadDone() { Add(uploads_done_, 1); }
  void AddStatusQuery() { Add(status_queries_, 1); }
  void AddRestart() { Add(restarts_, 1); }
  void AddWholeObjectAnswer() { Add(whole_object_answers_, 1); }
  void AddBytesDiscarded(uint64_t n) { Add(bytes_discarded_, n); }
  // `new_connections` is CURLINFO_NUM_CONNECTS of one finished attempt.
  void AddConnections(long new_connections);
  void AddLatency(double total_s, double ttfb_s);

  StatsSnapshot Snapshot() const;
  void Reset();

 private:
  static void Add(std::atomic<uint64_t>& c, uint64_t n) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  // Keeps a uniform sample of at most kMaxSamples values (reservoir sampling, Vitter's algorithm
  // R).
  static constexpr size_t kMaxSamples = 1 << 20;

  std::atomic<uint64_t> requests_{0}, bytes_received_{0}, bytes_delivered_{0}, bytes_sent_{0};
  std::atomic<uint64_t> failures_{0}, uploads_done_{0}, status_queries_{0}, restarts_{0};
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

#endif  // CC_GCSIO_TRANSFER_STATS_H_
