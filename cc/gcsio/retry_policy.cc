#include "cc/gcsio/retry_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace gcsio {

namespace {

// "RetryPolicy.<field> <rule>, got <value>" as an invalid_argument.
[[noreturn]] void Refuse(const char* field, const char* rule, double value) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "RetryPolicy.%s %s, got %g", field, rule, value);
  throw std::invalid_argument(buf);
}

}  // namespace

void RetryPolicy::Validate() const {
  if (max_attempts < 1) Refuse("max_attempts", "must be >= 1", max_attempts);
  if (!(initial_backoff_s >= 0)) Refuse("initial_backoff_s", "must be >= 0", initial_backoff_s);
  if (!(max_backoff_s >= initial_backoff_s)) {
    char rule[64];
    std::snprintf(rule, sizeof(rule), "must be >= initial_backoff_s (%g)", initial_backoff_s);
    Refuse("max_backoff_s", rule, max_backoff_s);
  }
  if (!(deadline_s > 0)) Refuse("deadline_s", "must be > 0", deadline_s);
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
