#include "cc/gcsio/retry_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace gcsio {

void RetryPolicy::Validate() const {
  if (max_attempts < 1) throw std::invalid_argument("RetryPolicy.max_attempts must be >= 1");
  if (!(initial_backoff_s >= 0)) {
    throw std::invalid_argument("RetryPolicy.initial_backoff_s must be >= 0");
  }
  if (!(max_backoff_s >= initial_backoff_s)) {
    throw std::invalid_argument("RetryPolicy.max_backoff_s must be >= initial_backoff_s");
  }
  if (!(deadline_s > 0)) throw std::invalid_argument("RetryPolicy.deadline_s must be > 0");
}

bool IsRetryableStatus(long status) {
  switch (status) {
    case 408:
    case 429:
    case 500:
    case 502:
    case 503:
    case 504:
      return true;
    default:
      return false;
  }
}

double BackoffSeconds(const RetryPolicy& policy, int attempts_made, std::mt19937_64& rng) {
  const int exponent = std::clamp(attempts_made - 1, 0, 62);
  const double cap =
      std::min(policy.max_backoff_s, policy.initial_backoff_s * std::ldexp(1.0, exponent));
  if (cap <= 0) return 0;
  return std::uniform_real_distribution<double>(0.0, cap)(rng);
}

bool MayRetry(const RetryPolicy& policy, int attempts_made, double elapsed_s, double backoff_s) {
  return attempts_made < policy.max_attempts && elapsed_s + backoff_s <= policy.deadline_s;
}

RetryDecision DecideRetry(const RetryPolicy& policy, int attempts_made, double elapsed_s,
                          std::mt19937_64& rng) {
  RetryDecision d;
  d.backoff_s = BackoffSeconds(policy, attempts_made, rng);
  d.retry = MayRetry(policy, attempts_made, elapsed_s, d.backoff_s);
  if (!d.retry && attempts_made < policy.max_attempts) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " (retry deadline of %.1f s reached)", policy.deadline_s);
    d.why_not = buf;
  }
  return d;
}

}  // namespace gcsio
