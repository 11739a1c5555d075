// One engine worker: a thread driving a curl multi handle. It takes fetches from the engine's
// queue up to its share of max_inflight_requests, runs their attempts on keep-alive
// connections, detects stalls and cancellation, and reports each attempt's verdict.
#ifndef CC_GCSIO_ENGINE_WORKER_H_
#define CC_GCSIO_ENGINE_WORKER_H_

#include <curl/curl.h>

#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "cc/gcsio/engine.h"
#include "cc/gcsio/http_transfer.h"
#include "cc/gcsio/response_check.h"

namespace gcsio {

class Engine::Worker {
 public:
  Worker(Engine* engine, int index);  // makes the curl multi handle; no thread yet
  ~Worker();                          // joins, then frees the curl handles
  void StartThread();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void Wake();  // interrupts curl_multi_poll (new work, cancellation, stop)
  void Join();

 private:
  struct Active {
    Job job;
    std::unique_ptr<HttpTransfer> transfer;
    uint64_t bytes;  // byte budget reserved from the engine
  };

  void Loop();
  void Start(Job job, uint64_t bytes);
  void CollectFinished();
  void CheckStallsAndCancels();
  // Ends attempt `slot` of active_ with `outcome`.
  void End(size_t slot, const Outcome& outcome);
  // Applies an attempt's verdict: deliver, retry with backoff, fail or drop. This is where the
  // C++ side retries (and the only place): a retryable outcome goes back to the engine's queue
  // through Engine::Requeue after a RetryPolicy backoff, asking only for the missing bytes.
  void Judge(Job job, const Outcome& outcome, const HttpTransfer* transfer);
  void DropAll();
  // The failure record of a fetch that ends with `outcome`: its message, with how far it got.
  static RequestFailure Failure(const Outcome& outcome, const FetchState& st, const Fetch& f,
                                const std::string& why);

  Engine* engine_;
  const int index_;
  CURLM* multi_;
  std::vector<Active> active_;
  std::vector<std::unique_ptr<HttpTransfer>> spare_;  // idle easy handles, reused
  std::mt19937_64 rng_;
  std::thread thread_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_ENGINE_WORKER_H_
