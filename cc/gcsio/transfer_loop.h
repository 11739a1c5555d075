// One loop of a TransferDriver: a thread driving one curl multi handle. It takes jobs of any
// request kind from the driver's queue up to its share of max_inflight_requests, runs their
// attempts on keep-alive connections with easy handles from one spare pool, ends attempts that
// stall or whose work was cancelled, and hands every ended attempt to TransferDriver::Settle.
#ifndef CC_GCSIO_TRANSFER_LOOP_H_
#define CC_GCSIO_TRANSFER_LOOP_H_

#include <curl/curl.h>

#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "cc/gcsio/transfer_driver.h"

namespace gcsio {

class TransferLoop {
 public:
  TransferLoop(TransferDriver* driver, int index);  // makes the curl multi handle; no thread yet
  ~TransferLoop();                                  // joins, then frees the curl handles
  TransferLoop(const TransferLoop&) = delete;
  TransferLoop& operator=(const TransferLoop&) = delete;

  void StartThread();
  void Wake();  // interrupts curl_multi_poll (new work, cancellation, stop)
  void Join();

 private:
  struct Active {
    DriverJob job;
    std::unique_ptr<EasyTransfer> transfer;
    uint64_t bytes;  // byte budget reserved from the driver
  };

  void Run();
  void Start(DriverJob job, uint64_t bytes);
  void CollectFinished();
  void CheckStallsAndCancels();
  // Ends attempt `slot` of active_ and settles it.
  void End(size_t slot, AttemptEnd end);
  void DropAll();  // stopping: every running attempt ends unfinished
  // An idle handle of `kind`, or a new one.
  std::unique_ptr<EasyTransfer> TakeSpare(RequestKind* kind);

  TransferDriver* driver_;
  const int index_;
  CURLM* multi_;
  std::vector<Active> active_;
  std::vector<std::pair<const RequestKind*, std::unique_ptr<EasyTransfer>>> spare_;
  std::mt19937_64 rng_;
  std::thread thread_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_TRANSFER_LOOP_H_
