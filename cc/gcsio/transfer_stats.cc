#include "cc/gcsio/transfer_stats.h"

#include <algorithm>
#include <cmath>

namespace gcsio {

void TransferStats::AddRetry(const std::string& cause) {
  std::lock_guard<std::mutex> lock(mu_);
  ++retries_by_cause_[cause];
}

void TransferStats::AddConnections(long new_connections) {
  if (new_connections > 0) {
    connections_opened_.fetch_add(static_cast<uint64_t>(new_connections),
                                  std::memory_order_relaxed);
  } else {
    connections_reused_.fetch_add(1, std::memory_order_relaxed);
  }
}

void TransferStats::AddLatency(double total_s, double ttfb_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++samples_seen_;
  if (latency_.size() < kMaxSamples) {
    latency_.push_back(total_s);
    ttfb_.push_back(ttfb_s);
    return;
  }
  const uint64_t slot = std::uniform_int_distribution<uint64_t>(0, samples_seen_ - 1)(rng_);
  if (slot < kMaxSamples) {
    latency_[slot] = total_s;
    ttfb_[slot] = ttfb_s;
  }
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

StatsSnapshot TransferStats::Snapshot() const {
  StatsSnapshot s;
  s.requests = requests_.load();
  s.bytes_received = bytes_received_.load();
  s.bytes_delivered = bytes_delivered_.load();
  s.bytes_sent = bytes_sent_.load();
  s.failures = failures_.load();
  s.uploads_done = uploads_done_.load();
  s.status_queries = status_queries_.load();
  s.restarts = restarts_.load();
  s.connections_opened = connections_opened_.load();
  s.connections_reused = connections_reused_.load();
  s.whole_object_answers = whole_object_answers_.load();
  s.bytes_discarded = bytes_discarded_.load();
  std::vector<double> latency, ttfb;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.retries_by_cause = retries_by_cause_;
    latency = latency_;
    ttfb = ttfb_;
  }
  for (const auto& [cause, n] : s.retries_by_cause) s.retries += n;
  s.latency_p50_s = Percentile(latency, 0.50);
  s.latency_p90_s = Percentile(latency, 0.90);
  s.latency_p99_s = Percentile(latency, 0.99);
  s.ttfb_p50_s = Percentile(ttfb, 0.50);
  s.ttfb_p90_s = Percentile(ttfb, 0.90);
  s.ttfb_p99_s = Percentile(ttfb, 0.99);
  return s;
}

void TransferStats::Reset() {
  requests_ = 0;
  bytes_received_ = 0;
  bytes_delivered_ = 0;
  bytes_sent_ = 0;
  failures_ = 0;
  uploads_done_ = 0;
  status_queries_ = 0;
  restarts_ = 0;
  connections_opened_ = 0;
  connections_reused_ = 0;
  whole_object_answers_ = 0;
  bytes_discarded_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  retries_by_cause_.clear();
  latency_.clear();
  ttfb_.clear();
  samples_seen_ = 0;
}

}  // namespace gcsio
