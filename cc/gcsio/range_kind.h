// The ranged-GET request kind of the TransferDriver: one job per fetch of a Batch. It prepares
// an RangeTransfer for the missing bytes of the fetch (pinned to the object's generation once
// known), and judges each ended attempt: deliver the fetch (or the part below the object's end),
// retry a retryable outcome (a retry asks only for the bytes still missing), or fail it.
#ifndef CC_GCSIO_RANGE_KIND_H_
#define CC_GCSIO_RANGE_KIND_H_

#include <memory>
#include <string>

#include "cc/gcsio/batch.h"
#include "cc/gcsio/request_kind.h"
#include "cc/gcsio/transfer_stats.h"

namespace gcsio {

// What a GET needs to know of its reader (all from RangeReaderOptions).
struct RangeKindOptions {
  std::string endpoint;
  double connect_timeout_s = 10;
  long recv_buffer_bytes = 256 << 10;
  std::string credential_description = "none";  // named in 401/403 messages
};

class RangeKind : public RequestKind {
 public:
  // `stats` (the driver's record) must outlive the kind.
  RangeKind(RangeKindOptions options, TransferStats* stats)
      : options_(std::move(options)), stats_(stats) {}

  // The driver jobs of every fetch of `batch`, in plan order.
  std::vector<DriverJob> Jobs(const std::shared_ptr<Batch>& batch);

  std::unique_ptr<EasyTransfer> NewTransfer() const override;
  uint64_t Bytes(const DriverJob& job) const override;
  AttemptClock& Clock(const DriverJob& job) override;
  void Prepare(const DriverJob& job, EasyTransfer* transfer, std::string bearer_token,
               uint64_t bytes) override;
  Judgement Judge(const DriverJob& job, const AttemptEnd& end) override;
  void BeforeRetry(const DriverJob&, const Outcome&) override {}
  void Fail(const DriverJob& job, const Outcome& outcome, const std::string& why_not) override;
  void Drop(const DriverJob& job, bool closed) override;

 private:
  static Batch& BatchOf(const DriverJob& job) { return static_cast<Batch&>(*job.work); }
  // The failure record of a fetch that ends with `outcome`: its message, with how far it got.
  static RequestFailure Failure(const Outcome& outcome, const FetchState& st, const Fetch& f,
                                const std::string& why);
  // Delivers a successful fetch (up to the object's end when it ended inside the fetch).
  void Deliver(Batch& batch, uint32_t fetch, const Outcome& outcome, const EasyTransfer* t);

  const RangeKindOptions options_;
  TransferStats* stats_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_RANGE_KIND_H_
