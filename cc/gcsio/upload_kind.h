// The resumable-upload request kind of the TransferDriver: one job per Upload, whose next request
// is its session start, a chunk PUT or a status query (UploadStep). It prepares an
// UploadTransfer for that request and judges each answer: the next step (kNext), the finished
// object checked against the bytes sent, a retry (which first asks the session what it holds,
// or starts a new session after an expired one), or a failure naming the object and offset.
#ifndef CC_GCSIO_UPLOAD_KIND_H_
#define CC_GCSIO_UPLOAD_KIND_H_

#include <memory>
#include <string>
#include <vector>

#include "cc/gcsio/request_kind.h"
#include "cc/gcsio/transfer_stats.h"
#include "cc/gcsio/uploader.h"

namespace gcsio {

class UploadKind : public RequestKind {
 public:
  // `options` and `stats` (the driver's record) must outlive the kind.
  UploadKind(const UploaderOptions& options, TransferStats* stats)
      : options_(options), stats_(stats) {}

  // Sets the upload's size and CRC-32C (computed here, over its spans) and returns its job.
  DriverJob Job(const std::shared_ptr<Upload>& upload);

  std::unique_ptr<EasyTransfer> NewTransfer() const override;
  uint64_t Bytes(const DriverJob& job) const override;
  AttemptClock& Clock(const DriverJob& job) override { return UploadOf(job).clock_; }
  void Prepare(const DriverJob& job, EasyTransfer* transfer, std::string bearer_token,
               uint64_t bytes) override;
  Judgement Judge(const DriverJob& job, const AttemptEnd& end) override;
  void BeforeRetry(const DriverJob& job, const Outcome& outcome) override;
  void Fail(const DriverJob& job, const Outcome& outcome, const std::string& why_not) override;
  void Drop(const DriverJob& job, bool closed) override;

 private:
  static Upload& UploadOf(const DriverJob& job) { return static_cast<Upload&>(*job.work); }
  // Judges an HTTP answer to `step` (status, Location, Range, body).
  Judgement JudgeAnswer(Upload& u, UploadStep step, const UploadAnswer& answer,
                        const std::string& token);
  // After a 308 to a chunk or query: the bytes the session holds.
  Judgement JudgeCommitted(Upload& u, UploadStep step, const UploadAnswer& answer);
  std::string StartUrl(const UploadSpec& spec) const;
  // `j` unless it restarts the session of an upload whose sessions used up the retry policy
  // (max_attempts sessions, or its deadline since the upload's first request): then kFail, the
  // message saying which limit ended it.
  Judgement LimitRestarts(const Upload& u, Judgement j) const;

  const UploaderOptions& options_;
  TransferStats* stats_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_UPLOAD_KIND_H_
