// The interface a request kind implements to run on the TransferDriver (transfer_driver.h): make
// and prepare its easy handles, say how many bytes an attempt may bring, judge a finished attempt,
// and complete, fail or drop its work. The driver keeps everything else: queue, budgets, tokens,
// stall and cancel checks, the retry decision (DecideRetry) and the requeue. Kinds today: ranged
// GETs of a Batch (range_kind.h) and resumable-upload requests of an Upload (upload_kind.h).
#ifndef CC_GCSIO_REQUEST_KIND_H_
#define CC_GCSIO_REQUEST_KIND_H_

#include <curl/curl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cc/gcsio/easy_transfer.h"
#include "cc/gcsio/outcome.h"

namespace gcsio {

// What queued jobs belong to (a Batch, an Upload): the driver asks only whether it was cancelled.
class TransferWork {
 public:
  virtual ~TransferWork() = default;
  virtual bool cancelled() const = 0;
};

// The attempts of one request, for DecideRetry: how many, and when the first began.
struct AttemptClock {
  int attempts = 0;
  std::chrono::steady_clock::time_point first_start;
};

class RequestKind;

// One queued request: request `index` of `work`, of kind `kind`.
struct DriverJob {
  RequestKind* kind = nullptr;
  std::shared_ptr<TransferWork> work;
  uint32_t index = 0;
  std::chrono::steady_clock::time_point not_before;  // when a delayed retry falls due
};

// How an attempt ended. `transfer` is its handle (null when none started: the token failed);
// `finished`: libcurl finished it with `code`, else the driver ended it with `local` (a stall,
// a cancellation, a token failure).
struct AttemptEnd {
  EasyTransfer* transfer = nullptr;
  bool finished = false;
  CURLcode code = CURLE_OK;
  Outcome local;
};

// A kind's verdict on an ended attempt. kDone: the kind completed the request itself; kNext:
// queue its next request at once (a new step, not a retry); kRetry: retryable (`outcome` has
// cause, status, message), the driver decides by DecideRetry; kFail: fails for good; kDrop:
// cancelled.
struct Judgement {
  enum class Action { kDone, kNext, kRetry, kFail, kDrop };
  Action action = Action::kDone;
  Outcome outcome;
};

class RequestKind {
 public:
  virtual ~RequestKind() = default;
  // A new easy handle of this kind (the driver keeps idle ones for reuse).
  virtual std::unique_ptr<EasyTransfer> NewTransfer() const = 0;
  // Bytes the job's next attempt may bring or send (its share of max_inflight_bytes).
  virtual uint64_t Bytes(const DriverJob& job) const = 0;
  // The job's attempt counter (the driver counts each start and resets nothing).
  virtual AttemptClock& Clock(const DriverJob& job) = 0;
  // Configures `transfer` (made by NewTransfer) for the job's next attempt.
  virtual void Prepare(const DriverJob& job, EasyTransfer* transfer, std::string bearer_token,
                       uint64_t bytes) = 0;
  virtual Judgement Judge(const DriverJob& job, const AttemptEnd& end) = 0;
  // A retry of `outcome` was decided: set the job up for it (e.g. ask the session what it holds).
  virtual void BeforeRetry(const DriverJob& job, const Outcome& outcome) = 0;
  // The request fails for good with `outcome`; `why_not` says why no retry is left ("" if none).
  virtual void Fail(const DriverJob& job, const Outcome& outcome, const std::string& why_not) = 0;
  // The request ends unfinished: cancelled, or `closed` (the driver stops).
  virtual void Drop(const DriverJob& job, bool closed) = 0;
};

}  // namespace gcsio

#endif  // CC_GCSIO_REQUEST_KIND_H_
