#include "cc/gcsio/range_kind.h"

#include <string>

#include "cc/gcsio/http_text.h"
#include "cc/gcsio/range_transfer.h"
#include "cc/gcsio/url.h"

namespace gcsio {
namespace {

// "(16,095,232 of 16,777,216 bytes received, up to offset 16,099,328)": how far the GET got over
// all its attempts, named when it is not the caller's range (coalesced or split).
std::string Progress(const Fetch& f, uint64_t received) {
  return "(" + Grouped(received) + " of " + Grouped(f.length) +
         " bytes of GET bytes=" + std::to_string(f.offset) + "-" +
         std::to_string(f.offset + f.length - 1) + " received, up to offset " +
         Grouped(f.offset + received) + ")";
}

}  // namespace

std::vector<DriverJob> RangeKind::Jobs(const std::shared_ptr<Batch>& batch) {
  std::vector<DriverJob> jobs;
  jobs.reserve(batch->num_fetches());
  for (uint32_t i = 0; i < batch->num_fetches(); ++i) jobs.push_back(DriverJob{this, batch, i, {}});
  return jobs;
}

std::unique_ptr<EasyTransfer> RangeKind::NewTransfer() const {
  return std::make_unique<RangeTransfer>();
}

uint64_t RangeKind::Bytes(const DriverJob& job) const {
  return BatchOf(job).remaining_bytes(job.index);
}

AttemptClock& RangeKind::Clock(const DriverJob& job) { return BatchOf(job).state(job.index).clock; }

void RangeKind::Prepare(const DriverJob& job, EasyTransfer* transfer, std::string bearer_token,
                        uint64_t) {
  Batch& batch = BatchOf(job);
  FetchState& st = batch.state(job.index);
  const Fetch& fetch = batch.fetch(job.index);
  const ObjectRef& obj = batch.object_of(job.index);
  std::atomic<int64_t>& pin = batch.pin_of(job.index);
  // A checked fetch resumes where its checksum state does (a whole block after a bad one).
  st.received = st.writer.Resume(st.received);
  AttemptSetup setup;
  // Once the object's generation is known every GET asks for exactly it.
  setup.sent_generation = pin.load();
  setup.pin = &pin;
  setup.url = MediaUrl(options_.endpoint, obj.bucket, obj.object, setup.sent_generation);
  setup.range = AttemptRange{fetch.offset + st.received, fetch.length - st.received};
  setup.body_pos = st.received;
  setup.bearer_token = std::move(bearer_token);
  setup.connect_timeout_ms = static_cast<long>(options_.connect_timeout_s * 1000);
  setup.recv_buffer_bytes = options_.recv_buffer_bytes;
  setup.writer = &st.writer;
  setup.cancelled = &batch.cancelled_flag();
  setup.stats = stats_;
  static_cast<RangeTransfer*>(transfer)->Begin(setup);
}

Judgement RangeKind::Judge(const DriverJob& job, const AttemptEnd& end) {
  Batch& batch = BatchOf(job);
  auto* transfer = static_cast<RangeTransfer*>(end.transfer);
  Outcome outcome = end.local;
  if (transfer != nullptr) {
    if (end.finished) {
      const ObjectRef& obj = batch.object_of(job.index);
      outcome = transfer->Finish(end.code, obj.bucket, obj.object, options_.credential_description);
    }
    batch.state(job.index).received += transfer->received();
  }
  if (outcome.cause == kChecksumMismatch) {
    // One re-fetch of the block (corruption in transit); a second mismatch is in the object.
    FetchState& st = batch.state(job.index);
    if (st.checksum_retries >= 1) {
      outcome.verdict = Verdict::kFail;
      outcome.message += ", again after re-fetching the block";
    } else {
      ++st.checksum_retries;
    }
  }
  Judgement j;
  switch (outcome.verdict) {
    case Verdict::kSuccess:
      Deliver(batch, job.index, outcome, transfer);
      j.action = Judgement::Action::kDone;
      break;
    case Verdict::kCancelled:
      j.action = Judgement::Action::kDrop;
      break;
    case Verdict::kRetry:
      j.action = Judgement::Action::kRetry;
      break;
    case Verdict::kFail:
      j.action = Judgement::Action::kFail;
      break;
  }
  j.outcome = std::move(outcome);
  return j;
}

void RangeKind::Deliver(Batch& batch, uint32_t fetch, const Outcome& outcome,
                        const EasyTransfer* t) {
  if (t != nullptr) {
    const auto* transfer = static_cast<const RangeTransfer*>(t);
    stats_->AddLatency(transfer->total_time_s(), transfer->ttfb_s());
  }
  const Fetch& f = batch.fetch(fetch);
  const uint64_t end = outcome.object_size > 0 ? outcome.object_size : f.offset + f.length;
  uint64_t delivered = 0;
  for (const Piece& p : f.pieces) {
    if (f.offset + p.fetch_offset + p.length <= end) delivered += p.length;
  }
  const FetchState& st = batch.state(fetch);
  if (outcome.object_size > 0 && st.writer.verifies()) {
    // The object ends before bytes its checksums cover: none of the fetch is trusted.
    stats_->AddFailure();
    RequestFailure shorter = Failure(outcome, st, f, "");
    shorter.cause = kChecksumMismatch;
    shorter.error = "the object is " + Grouped(outcome.object_size) +
                    " bytes, shorter than its block checksums say " + Progress(f, st.received);
    batch.FetchFailed(fetch, shorter);
    return;
  }
  stats_->AddBytesDelivered(delivered);
  if (outcome.object_size == 0) {
    batch.FetchSucceeded(fetch);
    return;
  }
  stats_->AddFailure();
  RequestFailure past_end = Failure(outcome, st, f, "");
  past_end.cause = "beyond_end";
  past_end.error = "reaches past the end of the object (size " + std::to_string(end) + " bytes) " +
                   Progress(f, st.received);
  batch.FetchSucceededUpTo(fetch, end, past_end);
}

void RangeKind::Fail(const DriverJob& job, const Outcome& outcome, const std::string& why_not) {
  Batch& batch = BatchOf(job);
  RequestFailure failure =
      Failure(outcome, batch.state(job.index), batch.fetch(job.index), why_not);
  // The version the bytes were read at (named by checksum failures).
  if (failure.pinned_generation == 0) failure.pinned_generation = batch.pin_of(job.index).load();
  batch.FetchFailed(job.index, failure);
}

void RangeKind::Drop(const DriverJob& job, bool) { BatchOf(job).FetchDropped(job.index); }

RequestFailure RangeKind::Failure(const Outcome& outcome, const FetchState& st, const Fetch& f,
                                  const std::string& why) {
  RequestFailure r;
  r.status = outcome.status;
  r.error = outcome.message + why + " " + Progress(f, st.received);
  r.attempts = st.clock.attempts;
  r.cause = outcome.cause;
  r.bytes_received = st.received;
  r.offset_reached = f.offset + st.received;
  r.pinned_generation = outcome.pinned_generation;
  r.seen_generation = outcome.seen_generation;
  if (outcome.cause == kChecksumMismatch) r.checksum = st.writer.mismatch();
  return r;
}

}  // namespace gcsio
