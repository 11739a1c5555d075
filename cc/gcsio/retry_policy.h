// Retry policy: which failures are retried, and how long to wait before the next attempt.
//
// Backoff is "full jitter" (a uniform draw in [0, min(max_backoff, initial * 2^(n-1))]), as
// described in the AWS Architecture Blog post "Exponential Backoff And Jitter" (2015); GCS's
// retry guidance also asks for exponential backoff with jitter.
#ifndef CC_GCSIO_RETRY_POLICY_H_
#define CC_GCSIO_RETRY_POLICY_H_

#include <random>
#include <string>

#include "cc/gcsio/defaults.h"

namespace gcsio {

struct RetryPolicy {
  int max_attempts = defaults::kMaxAttempts;  // attempts per fetch, first one included (>= 1)
  double initial_backoff_s = defaults::kInitialBackoffS;  // cap of the first backoff draw (s)
  double max_backoff_s = defaults::kMaxBackoffS;          // cap of any backoff draw (s)
  double deadline_s = defaults::kRetryDeadlineS;  // no new attempt this long after the first (s)

  // Throws std::invalid_argument naming the bad field.
  void Validate() const;
};

// True for HTTP statuses worth retrying: 408, 429, 500, 502, 503, 504.
bool IsRetryableStatus(long status);

// Backoff before attempt `attempts_made + 1`, in seconds (attempts_made >= 1).
double BackoffSeconds(const RetryPolicy& policy, int attempts_made, std::mt19937_64& rng);

// Whether another attempt may start: attempts left, and it would begin within the deadline.
// `elapsed_s` counts from the fetch's first attempt; `backoff_s` is the wait before the next one.
bool MayRetry(const RetryPolicy& policy, int attempts_made, double elapsed_s, double backoff_s);

// The decision after a failed attempt that may be retried, shared by every C++ request (ranged
// GETs and upload requests alike, in TransferDriver::Settle), so both languages and both
// directions retry by one policy.
struct RetryDecision {
  bool retry = false;
  double backoff_s = 0;  // wait before the next attempt (when retry)
  std::string why_not;   // when !retry: "" (attempts used up) or "(retry deadline of N s reached)"
};
RetryDecision DecideRetry(const RetryPolicy& policy, int attempts_made, double elapsed_s,
                          std::mt19937_64& rng);

}  // namespace gcsio

#endif  // CC_GCSIO_RETRY_POLICY_H_
