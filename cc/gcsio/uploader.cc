#include "cc/gcsio/uploader.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "cc/gcsio/upload_kind.h"

namespace gcsio {
namespace {

constexpr uint64_t kChunkGranule = 256 << 10;  // GCS: every chunk but the last a multiple of it

}  // namespace

void UploaderOptions::Validate() const {
  if (max_inflight_requests < 1) throw std::invalid_argument("max_inflight_requests must be >= 1");
  if (max_inflight_bytes < 1) throw std::invalid_argument("max_inflight_bytes must be >= 1");
  if (chunk_bytes < kChunkGranule || chunk_bytes % kChunkGranule != 0) {
    throw std::invalid_argument("chunk_bytes must be a multiple of 256 KiB (262144 bytes)");
  }
  if (!(connect_timeout_s > 0)) throw std::invalid_argument("connect_timeout_s must be > 0");
  if (!(stall_timeout_s > 0)) throw std::invalid_argument("stall_timeout_s must be > 0");
  retry.Validate();
}

bool Upload::Finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

bool Upload::WaitFor(double timeout_s) const {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_s < 0) {
    cv_.wait(lock, [this] { return finished_; });
    return true;
  }
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return finished_; });
}

UploadResult Upload::Result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return result_;
}

void Upload::Finish(UploadResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    result_ = std::move(result);
    finished_ = true;
  }
  cv_.notify_all();
}

namespace {

DriverOptions UploadDriverOptions(const UploaderOptions& o) {
  o.Validate();
  return DriverOptions{"Uploader",           "uploader",        1,      o.max_inflight_requests,
                       o.max_inflight_bytes, o.stall_timeout_s, o.retry};
}

}  // namespace

Uploader::Uploader(UploaderOptions options, TokenSource token_source)
    : options_(std::move(options)),
      driver_(UploadDriverOptions(options_), std::move(token_source)),
      kind_(std::make_unique<UploadKind>(options_, &driver_.stats())) {}

Uploader::~Uploader() { driver_.Stop(); }

std::shared_ptr<Upload> Uploader::Submit(UploadSpec spec) {
  driver_.CheckProcess();
  if (spec.bucket.empty() || spec.object.empty()) {
    throw std::invalid_argument("an upload needs a bucket and an object name");
  }
  auto upload = std::make_shared<Upload>(std::move(spec));
  DriverJob job = kind_->Job(upload);
  driver_.RefreshToken();
  std::vector<DriverJob> jobs;
  jobs.push_back(std::move(job));
  driver_.Submit(std::move(jobs));
  return upload;
}

void Uploader::Cancel(const std::shared_ptr<Upload>& upload) {
  upload->MarkCancelled();
  if (!driver_.Cancel(upload.get())) return;  // fork() child: nothing runs here
  upload->WaitFor(-1);
}

}  // namespace gcsio
