#include "cc/gcsio/upload_kind.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

#include "cc/gcsio/http_text.h"
#include "cc/gcsio/outcome.h"
#include "cc/gcsio/retry_policy.h"
#include "cc/gcsio/upload_response.h"
#include "cc/gcsio/url.h"

namespace gcsio {
namespace {

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

Judgement Judged(Judgement::Action action, Outcome o = Outcome()) {
  Judgement j;
  j.action = action;
  j.outcome = std::move(o);
  return j;
}

// kRetry for a retryable outcome, else kFail.
Judgement RetryOrFail(Outcome o) {
  return Judged(o.verdict == Verdict::kRetry ? Judgement::Action::kRetry : Judgement::Action::kFail,
                std::move(o));
}

Judgement FailWith(const std::string& cause, long status, std::string message) {
  return Judged(Judgement::Action::kFail,
                MakeOutcome(Verdict::kFail, cause, status, std::move(message)));
}

}  // namespace

DriverJob UploadKind::Job(const std::shared_ptr<Upload>& upload) {
  upload->progress_.size = upload->spec_.payload.size();
  // One pass over the bytes gives the block checksums and the object's CRC-32C.
  upload->progress_.crc32c =
      upload->spec_.payload.BlockCrc32c(upload->spec_.block_starts, &upload->progress_.block_crcs);
  return DriverJob{this, upload, 0, {}};
}

std::unique_ptr<EasyTransfer> UploadKind::NewTransfer() const {
  return std::make_unique<UploadTransfer>();
}

uint64_t UploadKind::Bytes(const DriverJob& job) const {
  const Upload& u = UploadOf(job);
  if (u.step_ != UploadStep::kChunk) return 0;
  return std::min(options_.chunk_bytes, u.spec_.payload.size() - u.committed_);
}

std::string UploadKind::StartUrl(const UploadSpec& spec) const {
  std::string url = NormalizeEndpoint(options_.endpoint) + "/upload/storage/v1/b/" +
                    PercentEncode(spec.bucket) +
                    "/o?uploadType=resumable&name=" + PercentEncode(spec.object);
  if (spec.if_generation_match >= 0) {
    url += "&ifGenerationMatch=" + std::to_string(spec.if_generation_match);
  }
  return url;
}

void UploadKind::Prepare(const DriverJob& job, EasyTransfer* transfer, std::string bearer_token,
                         uint64_t bytes) {
  Upload& u = UploadOf(job);
  if (u.progress_.requests++ == 0) u.first_start_ = std::chrono::steady_clock::now();
  UploadRequestSetup setup;
  setup.step = u.step_;
  setup.url = u.step_ == UploadStep::kStart ? StartUrl(u.spec_) : u.session_url_;
  setup.bearer_token = std::move(bearer_token);
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
    stats_->AddStatusQuery();
  }
  setup.connect_timeout_ms = static_cast<long>(options_.connect_timeout_s * 1000);
  setup.cancelled = &u.cancelled_;
  static_cast<UploadTransfer*>(transfer)->Begin(setup);
}

Judgement UploadKind::Judge(const DriverJob& job, const AttemptEnd& end) {
  Upload& u = UploadOf(job);
  if (u.cancelled()) return Judged(Judgement::Action::kDrop);
  if (!end.finished) return Judged(Judgement::Action::kRetry, end.local);
  auto* transfer = static_cast<UploadTransfer*>(end.transfer);
  const UploadAnswer answer = transfer->Finish(end.code);
  stats_->AddBytesSent(answer.sent);
  const std::string& token = transfer->setup().bearer_token;
  if (answer.code != CURLE_OK) {
    Outcome o = TransportOutcome(answer.code, RedactCredentials(answer.transport_error, token));
    o.status = answer.status;
    return RetryOrFail(std::move(o));
  }
  return LimitRestarts(u, JudgeAnswer(u, transfer->setup().step, answer, token));
}

Judgement UploadKind::LimitRestarts(const Upload& u, Judgement j) const {
  if (j.action != Judgement::Action::kRetry || j.outcome.cause != kSessionExpired) return j;
  // A restart is one more session: the sessions of one upload count against max_attempts, and
  // none starts after the retry deadline (counted from the upload's first request).
  const int sessions = u.progress_.restarts + 1;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - u.first_start_).count();
  const RetryPolicy& policy = options_.retry;
  if (MayRetry(policy, sessions, elapsed, 0)) return j;
  char why[160];
  if (sessions >= policy.max_attempts) {
    std::snprintf(why, sizeof(why), " (%d upload session(s) started, max_attempts %d)", sessions,
                  policy.max_attempts);
  } else {
    std::snprintf(why, sizeof(why),
                  " (retry deadline of %.1f s from the upload's first request reached)",
                  policy.deadline_s);
  }
  j.action = Judgement::Action::kFail;
  j.outcome.verdict = Verdict::kFail;
  j.outcome.message += why;
  return j;
}

Judgement UploadKind::JudgeAnswer(Upload& u, UploadStep step, const UploadAnswer& answer,
                                  const std::string& token) {
  const UploadSpec& spec = u.spec_;
  const long status = answer.status;
  u.progress_.status = status;
  if (step == UploadStep::kStart && (status == 200 || status == 201)) {
    if (answer.location.empty()) {
      return FailWith("no_session_url", status,
                      "the session start answered HTTP " + std::to_string(status) +
                          " without a Location header");
    }
    u.session_url_ = answer.location;
    u.step_ = UploadStep::kChunk;
    u.committed_ = 0;
    u.clock_.attempts = 0;
    return Judged(Judgement::Action::kNext);
  }
  if (step != UploadStep::kStart && status == 308) return JudgeCommitted(u, step, answer);
  if (step != UploadStep::kStart && (status == 200 || status == 201)) {
    const ObjectResource r = ParseObjectResource(answer.body);
    Outcome check =
        CheckUploadedObject(r, spec.bucket, spec.object, spec.payload.size(), u.progress_.crc32c);
    if (check.verdict != Verdict::kSuccess) return FailWith(check.cause, status, check.message);
    UploadResult res = u.progress_;
    res.ok = true;
    res.generation = r.generation;
    res.committed = spec.payload.size();
    res.attempts = u.clock_.attempts;
    stats_->AddUploadDone();
    u.Finish(std::move(res));
    return Judged(Judgement::Action::kDone);
  }
  if (status >= 200 && status < 300) {
    return FailWith("unexpected_status", status,
                    "unexpected HTTP " + std::to_string(status) + " to the " + StepName(step));
  }
  Outcome o = UploadStatusOutcome(status, RedactCredentials(answer.body, token), spec.bucket,
                                  spec.object, options_.credential_description,
                                  step != UploadStep::kStart, spec.if_generation_match);
  return RetryOrFail(std::move(o));
}

Judgement UploadKind::JudgeCommitted(Upload& u, UploadStep step, const UploadAnswer& answer) {
  const uint64_t size = u.spec_.payload.size();
  const int64_t held = ParseCommittedRange(answer.range);
  const uint64_t sent_end = step == UploadStep::kChunk ? u.committed_ + answer.sent : size;
  if (held < 0 || static_cast<uint64_t>(held) > sent_end || static_cast<uint64_t>(held) > size) {
    return FailWith("bad_range", answer.status,
                    "HTTP 308 with Range '" + answer.range + "' after the " + StepName(step) +
                        " (bytes sent up to offset " + std::to_string(sent_end) + ")");
  }
  const bool progress = static_cast<uint64_t>(held) > u.committed_;
  u.committed_ = static_cast<uint64_t>(held);
  u.progress_.committed = u.committed_;
  if (progress || step == UploadStep::kQuery) {
    if (progress) u.clock_.attempts = 0;  // a new request: attempts and deadline count afresh
    u.step_ = u.committed_ == size ? UploadStep::kQuery : UploadStep::kChunk;
    if (u.committed_ < size || progress) return Judged(Judgement::Action::kNext);
  }
  return Judged(
      Judgement::Action::kRetry,
      MakeOutcome(Verdict::kRetry, "no_progress", answer.status,
                  "HTTP 308 after the " + std::string(StepName(step)) +
                      " but the session holds no new byte (Range '" + answer.range + "')"));
}

void UploadKind::BeforeRetry(const DriverJob& job, const Outcome& outcome) {
  Upload& u = UploadOf(job);
  ++u.progress_.retries;
  if (outcome.cause == kSessionExpired) {
    // A new session, from byte 0.
    ++u.progress_.restarts;
    stats_->AddRestart();
    u.session_url_.clear();
    u.committed_ = 0;
    u.progress_.committed = 0;
    u.step_ = UploadStep::kStart;
  } else if (u.step_ != UploadStep::kStart) {
    // What did the session keep of the broken request? Ask before sending anything again.
    u.step_ = UploadStep::kQuery;
  }
}

void UploadKind::Fail(const DriverJob& job, const Outcome& outcome, const std::string& why_not) {
  Upload& u = UploadOf(job);
  UploadResult res = u.progress_;
  res.ok = false;
  res.cause = outcome.cause;
  res.status = outcome.status;
  res.attempts = u.clock_.attempts;
  res.committed = u.committed_;
  res.error = "upload of " + GsUri(u.spec_.bucket, u.spec_.object) + " failed: " + outcome.message +
              why_not + " (" + Grouped(u.committed_) + " of " + Grouped(u.spec_.payload.size()) +
              " bytes committed, offset reached " + Grouped(u.committed_) + "; " +
              std::to_string(u.clock_.attempts) + " attempt(s) of the last request, " +
              std::to_string(res.requests) + " request(s) in all)";
  u.Finish(std::move(res));
}

void UploadKind::Drop(const DriverJob& job, bool closed) {
  UploadOf(job).MarkCancelled();
  Fail(job,
       MakeOutcome(Verdict::kCancelled, "cancelled", 0,
                   closed ? "cancelled: the uploader was closed" : "cancelled"),
       "");
}

}  // namespace gcsio
