#include "cc/gcsio/uploader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "cc/gcsio/http_text.h"
#include "cc/gcsio/http_transfer.h"
#include "cc/gcsio/response_check.h"
#include "cc/gcsio/upload_response.h"
#include "cc/gcsio/url.h"

namespace gcsio {
namespace {

constexpr auto kPollCap = std::chrono::milliseconds(100);
constexpr uint64_t kChunkGranule = 256 << 10;  // GCS: every chunk but the last a multiple of it

const char* StepName(UploadStep s) {
  switch (s) {
    case UploadStep::kStart:
      return "session start";
    case UploadStep::kChunk:
      return "chunk PUT";
    case UploadStep::kQuery:
      return "status query";
  }
  return "";
}

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

Uploader::Uploader(UploaderOptions options, TokenSource token_source)
    : options_(std::move(options)),
      tokens_(std::move(token_source), defaults::kTokenRefreshMarginS, defaults::kTokenUnknownTtlS),
      owner_pid_(getpid()),
      multi_(nullptr),
      rng_(std::random_device{}()) {
  options_.Validate();
  GlobalCurlInitOnce();
  multi_ = curl_multi_init();
  if (multi_ == nullptr) throw std::runtime_error("curl_multi_init failed");
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS,
                    static_cast<long>(options_.max_inflight_requests + 4));
  thread_ = std::thread([this] { Loop(); });
}

Uploader::~Uploader() {
  if (getpid() != owner_pid_) {
    // A fork() child: the thread and its sockets belong to the parent; leave them.
    thread_.detach();
    return;
  }
  std::vector<Job> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped = queue_.TakeAll();
  }
  for (Job& j : dropped) {
    j.upload->cancelled_ = true;
    Fail(j.upload, "cancelled", 0, "cancelled: the uploader was closed", "");
  }
  cv_.notify_all();
  curl_multi_wakeup(multi_);
  thread_.join();
  for (Active& a : active_) curl_multi_remove_handle(multi_, a.transfer->easy());
  active_.clear();
  spare_.clear();
  curl_multi_cleanup(multi_);
}

std::string Uploader::StartUrl(const UploadSpec& spec) const {
  std::string url = NormalizeEndpoint(options_.endpoint) + "/upload/storage/v1/b/" +
                    PercentEncode(spec.bucket) +
                    "/o?uploadType=resumable&name=" + PercentEncode(spec.object);
  if (spec.if_generation_match >= 0) {
    url += "&ifGenerationMatch=" + std::to_string(spec.if_generation_match);
  }
  return url;
}

std::shared_ptr<Upload> Uploader::Submit(UploadSpec spec) {
  if (getpid() != owner_pid_) {
    throw std::runtime_error("Uploader was created in process " + std::to_string(owner_pid_) +
                             " and cannot be used after fork(); create a new one here");
  }
  if (spec.bucket.empty() || spec.object.empty()) {
    throw std::invalid_argument("an upload needs a bucket and an object name");
  }
  auto upload = std::make_shared<Upload>(std::move(spec));
  upload->progress_.size = upload->spec_.payload.size();
  upload->progress_.crc32c = upload->spec_.payload.Crc32c();
  tokens_.Get();  // fail early on a broken token provider; refreshes a token that is due
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw std::runtime_error("uploader is closed");
    queue_.ready.push_back(Job{upload, Clock::now()});
  }
  cv_.notify_all();
  curl_multi_wakeup(multi_);
  return upload;
}

void Uploader::Cancel(const std::shared_ptr<Upload>& upload) {
  upload->cancelled_ = true;
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = !queue_.RemoveIf([&upload](const Job& j) { return j.upload == upload; }).empty();
  }
  if (queued) Fail(upload, "cancelled", 0, "cancelled", "");
  if (getpid() != owner_pid_) return;
  curl_multi_wakeup(multi_);
  upload->WaitFor(-1);
}

UploadStatsSnapshot Uploader::Stats() const {
  UploadStatsSnapshot s;
  s.requests = requests_.load();
  s.bytes_sent = bytes_sent_.load();
  s.uploads_done = done_.load();
  s.failures = failures_.load();
  s.retries = retries_.load();
  s.status_queries = status_queries_.load();
  s.restarts = restarts_.load();
  s.connections_opened = connections_.load();
  std::lock_guard<std::mutex> lock(stats_mu_);
  s.retries_by_cause = retries_by_cause_;
  return s;
}

bool Uploader::TakeLocked(Job* job, uint64_t* bytes) {
  const auto now = Clock::now();
  queue_.PromoteDue(now);
  if (stopping_ || queue_.ready.empty() || inflight_requests_ >= options_.max_inflight_requests) {
    return false;
  }
  const Upload& next = *queue_.ready.front().upload;
  uint64_t want = 0;
  if (next.step_ == UploadStep::kChunk) {
    want = std::min(options_.chunk_bytes, next.spec_.payload.size() - next.committed_);
  }
  if (inflight_requests_ > 0 && inflight_bytes_ + want > options_.max_inflight_bytes) return false;
  *job = std::move(queue_.ready.front());
  queue_.ready.pop_front();
  *bytes = want;
  ++inflight_requests_;
  inflight_bytes_ += want;
  return true;
}

void Uploader::Loop() {
  while (true) {
    std::vector<std::pair<Job, uint64_t>> starts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      Job job;
      uint64_t bytes = 0;
      while (TakeLocked(&job, &bytes)) starts.emplace_back(std::move(job), bytes);
      if (stopping_) break;
      if (starts.empty() && active_.empty()) {
        if (!queue_.has_delayed() && queue_.ready.empty()) {
          cv_.wait(lock);
        } else if (queue_.has_delayed()) {
          cv_.wait_until(lock, queue_.next_due());
        } else {
          cv_.wait_for(lock, kPollCap);
        }
        continue;
      }
    }
    for (auto& [job, bytes] : starts) Start(std::move(job.upload), bytes);
    int running = 0;
    curl_multi_perform(multi_, &running);
    Collect();
    CheckStallsAndCancels();
    if (!active_.empty()) {
      Clock::duration wait = kPollCap;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (queue_.has_delayed()) {
          wait = std::clamp<Clock::duration>(queue_.next_due() - Clock::now(),
                                             Clock::duration::zero(), kPollCap);
        }
      }
      const int ms =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
      curl_multi_poll(multi_, nullptr, 0, std::max(ms, 1), nullptr);
    }
  }
  // Stopping: end what runs (the destructor fails what was queued).
  for (Active& a : active_) a.upload->cancelled_ = true;
  while (!active_.empty()) End(active_.size() - 1, nullptr, "cancelled", "cancelled");
}

void Uploader::Start(std::shared_ptr<Upload> upload, uint64_t bytes) {
  Upload& u = *upload;
  if (u.attempts_ == 0) u.first_start_ = Clock::now();
  ++u.attempts_;
  ++u.progress_.requests;
  std::string token;
  try {
    token = tokens_.Get();
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --inflight_requests_;
      inflight_bytes_ -= bytes;
    }
    Judge(upload, u.step_, nullptr, "token", std::string("token_provider failed: ") + e.what(), "");
    return;
  }
  std::unique_ptr<UploadTransfer> transfer;
  if (spare_.empty()) {
    transfer = std::make_unique<UploadTransfer>();
  } else {
    transfer = std::move(spare_.back());
    spare_.pop_back();
  }
  UploadRequestSetup setup;
  setup.step = u.step_;
  setup.url = u.step_ == UploadStep::kStart ? StartUrl(u.spec_) : u.session_url_;
  setup.bearer_token = std::move(token);
  setup.total = u.spec_.payload.size();
  if (u.step_ == UploadStep::kChunk) {
    setup.first = u.committed_;
    setup.length = bytes;
    setup.payload = &u.spec_.payload;
    if (u.committed_ < u.sent_high_) {
      u.progress_.resent_bytes += std::min(u.sent_high_, u.committed_ + bytes) - u.committed_;
    }
    u.sent_high_ = std::max(u.sent_high_, u.committed_ + bytes);
  } else if (u.step_ == UploadStep::kQuery) {
    ++u.progress_.status_queries;
    status_queries_.fetch_add(1, std::memory_order_relaxed);
  }
  setup.connect_timeout_ms = static_cast<long>(options_.connect_timeout_s * 1000);
  setup.cancelled = &u.cancelled_;
  transfer->Begin(setup);
  curl_multi_add_handle(multi_, transfer->easy());
  requests_.fetch_add(1, std::memory_order_relaxed);
  active_.push_back(Active{std::move(upload), std::move(transfer), bytes});
}

void Uploader::Collect() {
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    for (size_t i = 0; i < active_.size(); ++i) {
      if (active_[i].transfer->easy() != msg->easy_handle) continue;
      const UploadAnswer answer = active_[i].transfer->Finish(msg->data.result);
      End(i, &answer, nullptr, "");
      break;
    }
  }
}

void Uploader::CheckStallsAndCancels() {
  const auto now = Clock::now();
  const auto stall = std::chrono::duration<double>(options_.stall_timeout_s);
  for (size_t i = active_.size(); i-- > 0;) {
    if (active_[i].upload->cancelled_) {
      End(i, nullptr, "cancelled", "cancelled");
    } else if (now - active_[i].transfer->last_activity() > stall) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "stalled: no bytes for %.1f s", options_.stall_timeout_s);
      End(i, nullptr, "stall", buf);
    }
  }
}

void Uploader::End(size_t slot, const UploadAnswer* answer, const char* local_cause,
                   const std::string& local_message) {
  Active a = std::move(active_[slot]);
  active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(slot));
  curl_multi_remove_handle(multi_, a.transfer->easy());
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inflight_requests_;
    inflight_bytes_ -= a.bytes;
  }
  cv_.notify_all();
  if (answer != nullptr) {
    bytes_sent_.fetch_add(answer->sent, std::memory_order_relaxed);
    connections_.fetch_add(static_cast<uint64_t>(a.transfer->new_connections()),
                           std::memory_order_relaxed);
  }
  const UploadStep step = a.transfer->setup().step;
  const std::string token = a.transfer->setup().bearer_token;
  spare_.push_back(std::move(a.transfer));
  Judge(a.upload, step, answer, local_cause, local_message, token);
}

void Uploader::Judge(const std::shared_ptr<Upload>& upload, UploadStep step,
                     const UploadAnswer* answer, const char* local_cause,
                     const std::string& local_message, const std::string& token) {
  Upload& u = *upload;
  const UploadSpec& spec = u.spec_;
  if (u.cancelled_) {
    Fail(upload, "cancelled", 0, "cancelled", "");
    return;
  }
  Outcome o;
  if (answer == nullptr) {
    o.verdict = Verdict::kRetry;
    o.cause = local_cause;
    o.message = local_message;
  } else if (answer->code != CURLE_OK) {
    o = TransportOutcome(answer->code, RedactCredentials(answer->transport_error, token));
    o.status = answer->status;
  } else {
    const long status = answer->status;
    u.progress_.status = status;
    if (step == UploadStep::kStart && (status == 200 || status == 201)) {
      if (answer->location.empty()) {
        Fail(upload, "no_session_url", status,
             "the session start answered HTTP " + std::to_string(status) +
                 " without a Location header",
             "");
        return;
      }
      u.session_url_ = answer->location;
      u.step_ = UploadStep::kChunk;
      u.committed_ = 0;
      u.attempts_ = 0;
      Requeue(upload, 0);
      return;
    }
    if (step != UploadStep::kStart && status == 308) {
      const int64_t held = ParseCommittedRange(answer->range);
      const uint64_t sent_end =
          step == UploadStep::kChunk ? u.committed_ + answer->sent : spec.payload.size();
      if (held < 0 || static_cast<uint64_t>(held) > sent_end ||
          static_cast<uint64_t>(held) > spec.payload.size()) {
        Fail(upload, "bad_range", status,
             "HTTP 308 with Range '" + answer->range + "' after the " + StepName(step) +
                 " (bytes sent up to offset " + std::to_string(sent_end) + ")",
             "");
        return;
      }
      const bool progress = static_cast<uint64_t>(held) > u.committed_;
      u.committed_ = static_cast<uint64_t>(held);
      u.progress_.committed = u.committed_;
      if (progress || step == UploadStep::kQuery) {
        if (progress) u.attempts_ = 0;  // a new request: attempts and deadline count afresh
        u.step_ = u.committed_ == spec.payload.size() ? UploadStep::kQuery : UploadStep::kChunk;
        if (u.committed_ < spec.payload.size() || progress) {
          Requeue(upload, 0);
          return;
        }
      }
      o.verdict = Verdict::kRetry;
      o.cause = "no_progress";
      o.status = status;
      o.message = "HTTP 308 after the " + std::string(StepName(step)) +
                  " but the session holds no new byte (Range '" + answer->range + "')";
    } else if (step != UploadStep::kStart && (status == 200 || status == 201)) {
      const ObjectResource r = ParseObjectResource(answer->body);
      Outcome check =
          CheckUploadedObject(r, spec.bucket, spec.object, spec.payload.size(), u.progress_.crc32c);
      if (check.verdict != Verdict::kSuccess) {
        Fail(upload, check.cause, status, check.message, "");
        return;
      }
      UploadResult res = u.progress_;
      res.ok = true;
      res.generation = r.generation;
      res.committed = spec.payload.size();
      res.attempts = u.attempts_;
      done_.fetch_add(1, std::memory_order_relaxed);
      u.Finish(std::move(res));
      return;
    } else if (status >= 200 && status < 300) {
      Fail(upload, "unexpected_status", status,
           "unexpected HTTP " + std::to_string(status) + " to the " + StepName(step), "");
      return;
    } else {
      o = UploadStatusOutcome(status, RedactCredentials(answer->body, token), spec.bucket,
                              spec.object, options_.credential_description,
                              step != UploadStep::kStart, spec.if_generation_match);
    }
  }
  if (o.verdict != Verdict::kRetry) {
    Fail(upload, o.cause, o.status, o.message, "");
    return;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - u.first_start_).count();
  const RetryDecision next = DecideRetry(options_.retry, u.attempts_, elapsed, rng_);
  if (!next.retry) {
    Fail(upload, o.cause, o.status, o.message, next.why_not);
    return;
  }
  retries_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++retries_by_cause_[o.cause];
  }
  ++u.progress_.retries;
  if (o.cause == kSessionExpired) {
    // A new session, from byte 0.
    ++u.progress_.restarts;
    restarts_.fetch_add(1, std::memory_order_relaxed);
    u.session_url_.clear();
    u.committed_ = 0;
    u.progress_.committed = 0;
    u.step_ = UploadStep::kStart;
  } else if (u.step_ != UploadStep::kStart) {
    // What did the session keep of the broken request? Ask before sending anything again.
    u.step_ = UploadStep::kQuery;
  }
  Requeue(upload, next.backoff_s);
}

void Uploader::Requeue(std::shared_ptr<Upload> upload, double delay_s) {
  bool queued = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && !upload->cancelled_) {
      const auto due = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(delay_s));
      if (delay_s <= 0) {
        queue_.ready.push_front(Job{upload, due});
      } else {
        queue_.Delay(Job{upload, due});
      }
      queued = true;
    }
  }
  if (!queued) {
    Fail(upload, "cancelled", 0, "cancelled", "");
    return;
  }
  cv_.notify_all();
}

void Uploader::Fail(const std::shared_ptr<Upload>& upload, const std::string& cause, long status,
                    const std::string& message, const std::string& why) {
  Upload& u = *upload;
  UploadResult res = u.progress_;
  res.ok = false;
  res.cause = cause;
  res.status = status;
  res.attempts = u.attempts_;
  res.committed = u.committed_;
  res.error = "upload of " + GsUri(u.spec_.bucket, u.spec_.object) + " failed: " + message + why +
              " (" + Grouped(u.committed_) + " of " + Grouped(u.spec_.payload.size()) +
              " bytes committed, offset reached " + Grouped(u.committed_) + "; " +
              std::to_string(u.attempts_) + " attempt(s) of the last request, " +
              std::to_string(res.requests) + " request(s) in all)";
  if (cause != "cancelled") failures_.fetch_add(1, std::memory_order_relaxed);
  u.Finish(std::move(res));
}

}  // namespace gcsio
