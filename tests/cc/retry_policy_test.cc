// Retry policy: retryable statuses, full-jitter backoff bounds, attempt and deadline limits.
#include "cc/gcsio/retry_policy.h"

#include <random>
#include <stdexcept>

#include "tests/cc/check.h"

namespace gcsio {
namespace {

void RetryableStatuses() {
  for (long s : {408, 429, 500, 502, 503, 504}) CHECK(IsRetryableStatus(s));
  for (long s : {200, 206, 400, 401, 403, 404, 412, 416, 501}) CHECK(!IsRetryableStatus(s));
}

void BackoffStaysWithinTheJitterWindow() {
  RetryPolicy p;
  p.initial_backoff_s = 0.1;
  p.max_backoff_s = 1.0;
  std::mt19937_64 rng(1);
  for (int attempts = 1; attempts <= 70; ++attempts) {
    const double cap = std::min(1.0, 0.1 * static_cast<double>(1ULL << std::min(attempts - 1, 62)));
    double lo = 1e9, hi = -1;
    for (int i = 0; i < 2000; ++i) {
      const double b = BackoffSeconds(p, attempts, rng);
      CHECK(b >= 0 && b <= cap);
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
    // Full jitter spreads draws over the whole window.
    CHECK(lo < 0.05 * cap);
    CHECK(hi > 0.95 * cap);
  }
  RetryPolicy zero;
  zero.initial_backoff_s = 0;
  zero.max_backoff_s = 0;
  CHECK_EQ(BackoffSeconds(zero, 3, rng), 0.0);
}

void AttemptAndDeadlineLimits() {
  RetryPolicy p;
  p.max_attempts = 3;
  p.deadline_s = 10;
  CHECK(MayRetry(p, 1, 0, 0));
  CHECK(MayRetry(p, 2, 9, 1));
  CHECK(!MayRetry(p, 3, 0, 0));    // attempts used up
  CHECK(!MayRetry(p, 1, 9.5, 1));  // would start past the deadline
  RetryPolicy once;
  once.max_attempts = 1;
  CHECK(!MayRetry(once, 1, 0, 0));
}

void ValidateNamesBadFields() {
  RetryPolicy ok;
  ok.Validate();
  RetryPolicy a;
  a.max_attempts = 0;
  CHECK_THROWS(a.Validate(), std::invalid_argument);
  RetryPolicy b;
  b.initial_backoff_s = -1;
  CHECK_THROWS(b.Validate(), std::invalid_argument);
  RetryPolicy c;
  c.max_backoff_s = 0.01;
  CHECK_THROWS(c.Validate(), std::invalid_argument);
  RetryPolicy d;
  d.deadline_s = 0;
  CHECK_THROWS(d.Validate(), std::invalid_argument);
}

}  // namespace
}  // namespace gcsio

int main() {
  gcsio::RetryableStatuses();
  gcsio::BackoffStaysWithinTheJitterWindow();
  gcsio::AttemptAndDeadlineLimits();
  gcsio::ValidateNamesBadFields();
  std::cout << "retry_policy_test: OK" << std::endl;
  return 0;
}
