// Retry policy: retryable statuses, full-jitter backoff bounds, attempt and deadline limits.
#include "cc/gcsio/retry_policy.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

namespace gcsio {
namespace {

TEST(RetryPolicyTest, RetryableStatuses) {
  for (long s : {408, 429, 500, 502, 503, 504}) EXPECT_TRUE(IsRetryableStatus(s));
  for (long s : {200, 206, 400, 401, 403, 404, 412, 416, 501}) EXPECT_TRUE(!IsRetryableStatus(s));
}

TEST(RetryPolicyTest, BackoffStaysWithinTheJitterWindow) {
  RetryPolicy p;
  p.initial_backoff_s = 0.1;
  p.max_backoff_s = 1.0;
  std::mt19937_64 rng(1);
  for (int attempts = 1; attempts <= 70; ++attempts) {
    const double cap = std::min(1.0, 0.1 * static_cast<double>(1ULL << std::min(attempts - 1, 62)));
    double lo = 1e9, hi = -1;
    for (int i = 0; i < 2000; ++i) {
      const double b = BackoffSeconds(p, attempts, rng);
      EXPECT_TRUE(b >= 0 && b <= cap);
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
    // Full jitter spreads draws over the whole window.
    EXPECT_TRUE(lo < 0.05 * cap);
    EXPECT_TRUE(hi > 0.95 * cap);
  }
  RetryPolicy zero;
  zero.initial_backoff_s = 0;
  zero.max_backoff_s = 0;
  EXPECT_EQ(BackoffSeconds(zero, 3, rng), 0.0);
}

TEST(RetryPolicyTest, AttemptAndDeadlineLimits) {
  RetryPolicy p;
  p.max_attempts = 3;
  p.deadline_s = 10;
  EXPECT_TRUE(MayRetry(p, 1, 0, 0));
  EXPECT_TRUE(MayRetry(p, 2, 9, 1));
  EXPECT_TRUE(!MayRetry(p, 3, 0, 0));    // attempts used up
  EXPECT_TRUE(!MayRetry(p, 1, 9.5, 1));  // would start past the deadline
  RetryPolicy once;
  once.max_attempts = 1;
  EXPECT_TRUE(!MayRetry(once, 1, 0, 0));
}

TEST(RetryPolicyTest, ValidateNamesBadFields) {
  RetryPolicy ok;
  ok.Validate();
  RetryPolicy a;
  a.max_attempts = 0;
  EXPECT_THROW(a.Validate(), std::invalid_argument);
  RetryPolicy b;
  b.initial_backoff_s = -1;
  EXPECT_THROW(b.Validate(), std::invalid_argument);
  RetryPolicy c;
  c.max_backoff_s = 0.01;
  EXPECT_THROW(c.Validate(), std::invalid_argument);
  RetryPolicy d;
  d.deadline_s = 0;
  EXPECT_THROW(d.Validate(), std::invalid_argument);
}

TEST(RetryPolicyTest, DecideRetrySaysWhyItStops) {
  RetryPolicy p;
  p.max_attempts = 3;
  p.initial_backoff_s = 0.5;
  p.max_backoff_s = 0.5;
  p.deadline_s = 10;
  std::mt19937_64 rng(5);
  RetryDecision d = DecideRetry(p, 1, 0.0, rng);
  EXPECT_TRUE(d.retry);
  EXPECT_TRUE(d.backoff_s >= 0 && d.backoff_s <= 0.5);
  EXPECT_EQ(d.why_not, "");
  d = DecideRetry(p, 3, 0.0, rng);  // attempts used up
  EXPECT_FALSE(d.retry);
  EXPECT_EQ(d.why_not, "");
  d = DecideRetry(p, 1, 10.5, rng);  // the deadline has passed
  EXPECT_FALSE(d.retry);
  EXPECT_EQ(d.why_not, " (retry deadline of 10.0 s reached)");
}

}  // namespace
}  // namespace gcsio
