#include "cc/gcsio/engine_worker.h"

#include <stdexcept>
#include <string>

#include "cc/gcsio/http_text.h"
#include "cc/gcsio/url.h"

namespace gcsio {
namespace {

constexpr auto kPollCap = std::chrono::milliseconds(100);

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", s);
  return buf;
}

// "(16,095,232 of 16,777,216 bytes received, up to offset 16,099,328)": how far the GET got over
// all its attempts, named when it is not the caller's range (coalesced or split).
std::string Progress(const Fetch& f, uint64_t received) {
  return "(" + Grouped(received) + " of " + Grouped(f.length) +
         " bytes of GET bytes=" + std::to_string(f.offset) + "-" +
         std::to_string(f.offset + f.length - 1) + " received, up to offset " +
         Grouped(f.offset + received) + ")";
}

}  // namespace

Engine::Worker::Worker(Engine* engine, int index)
    : engine_(engine), index_(index), multi_(curl_multi_init()), rng_(std::random_device{}()) {
  if (multi_ == nullptr) throw std::runtime_error("curl_multi_init failed");
  // Keep enough idle connections cached that every request slot can reuse one.
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(engine->WorkerCap(index) + 4));
}

void Engine::Worker::StartThread() {
  thread_ = std::thread([this] { Loop(); });
}

Engine::Worker::~Worker() {
  Join();
  curl_multi_cleanup(multi_);
}

void Engine::Worker::Join() {
  if (thread_.joinable()) thread_.join();
}

void Engine::Worker::Wake() { curl_multi_wakeup(multi_); }

void Engine::Worker::Loop() {
  while (true) {
    Job job;
    uint64_t bytes = 0;
    while (engine_->TakeJob(index_, static_cast<int>(active_.size()), &job, &bytes)) {
      Start(std::move(job), bytes);
    }
    if (engine_->stopping()) break;
    if (active_.empty()) {
      engine_->WaitForWork(index_);
      continue;
    }
    int running = 0;
    curl_multi_perform(multi_, &running);
    CollectFinished();
    CheckStallsAndCancels();
    if (!active_.empty()) {
      const auto wait = engine_->TimeToNextRetry(kPollCap);
      const int ms =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
      curl_multi_poll(multi_, nullptr, 0, std::max(ms, 1), nullptr);
    }
  }
  DropAll();
}

void Engine::Worker::Start(Job job, uint64_t bytes) {
  Batch& batch = *job.batch;
  FetchState& st = batch.state(job.fetch);
  const Fetch& fetch = batch.fetch(job.fetch);
  if (st.attempts == 0) st.first_start = Clock::now();
  ++st.attempts;

  std::string token;
  try {
    token = engine_->tokens_.Get();
  } catch (const std::exception& e) {
    engine_->ReleaseAttempt(bytes);
    Outcome o;
    o.verdict = Verdict::kRetry;
    o.cause = "token";
    o.message = std::string("token_provider failed: ") + e.what();
    Judge(std::move(job), o, nullptr);
    return;
  }

  std::unique_ptr<HttpTransfer> transfer;
  if (spare_.empty()) {
    transfer = std::make_unique<HttpTransfer>();
  } else {
    transfer = std::move(spare_.back());
    spare_.pop_back();
  }
  const ObjectRef& obj = batch.object_of(job.fetch);
  const EngineOptions& opt = engine_->options_;
  std::atomic<int64_t>& pin = batch.pin_of(job.fetch);
  AttemptSetup setup;
  // Once the object's generation is known every GET asks for exactly it.
  setup.sent_generation = pin.load();
  setup.pin = &pin;
  setup.url = MediaUrl(opt.endpoint, obj.bucket, obj.object, setup.sent_generation);
  setup.range = AttemptRange{fetch.offset + st.received, fetch.length - st.received};
  setup.body_pos = st.received;
  setup.bearer_token = std::move(token);
  setup.connect_timeout_ms = static_cast<long>(opt.connect_timeout_s * 1000);
  setup.recv_buffer_bytes = opt.recv_buffer_bytes;
  setup.writer = &st.writer;
  setup.cancelled = &batch.cancelled_flag();
  setup.stats = &engine_->stats_;
  transfer->Begin(setup);
  curl_multi_add_handle(multi_, transfer->easy());
  engine_->stats_.AddRequest();
  active_.push_back(Active{std::move(job), std::move(transfer), bytes});
}

void Engine::Worker::CollectFinished() {
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    for (size_t i = 0; i < active_.size(); ++i) {
      if (active_[i].transfer->easy() != msg->easy_handle) continue;
      const Active& a = active_[i];
      const ObjectRef& obj = a.job.batch->object_of(a.job.fetch);
      End(i, a.transfer->Finish(msg->data.result, obj.bucket, obj.object,
                                engine_->options_.credential_description));
      break;
    }
  }
}

void Engine::Worker::CheckStallsAndCancels() {
  const auto now = Clock::now();
  const auto stall = std::chrono::duration<double>(engine_->options_.stall_timeout_s);
  for (size_t i = active_.size(); i-- > 0;) {
    if (active_[i].job.batch->cancelled()) {
      Outcome o;
      o.verdict = Verdict::kCancelled;
      End(i, o);
    } else if (now - active_[i].transfer->last_activity() > stall) {
      Outcome o;
      o.verdict = Verdict::kRetry;
      o.cause = "stall";
      o.message = "stalled: no bytes for " + Seconds(engine_->options_.stall_timeout_s) + " s";
      End(i, o);
    }
  }
}

void Engine::Worker::End(size_t slot, const Outcome& outcome) {
  Active a = std::move(active_[slot]);
  active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(slot));
  curl_multi_remove_handle(multi_, a.transfer->easy());
  FetchState& st = a.job.batch->state(a.job.fetch);
  st.received += a.transfer->received();
  if (outcome.status != 0) engine_->stats_.AddConnections(a.transfer->new_connections());
  engine_->ReleaseAttempt(a.bytes);
  Judge(std::move(a.job), outcome, a.transfer.get());
  spare_.push_back(std::move(a.transfer));
}

void Engine::Worker::Judge(Job job, const Outcome& outcome, const HttpTransfer* transfer) {
  Batch& batch = *job.batch;
  const uint32_t fetch = job.fetch;
  FetchState& st = batch.state(fetch);
  ReadStats& stats = engine_->stats_;
  const RetryPolicy& policy = engine_->options_.retry;
  Verdict verdict = outcome.verdict;
  if (verdict == Verdict::kRetry && batch.cancelled()) verdict = Verdict::kCancelled;
  switch (verdict) {
    case Verdict::kSuccess: {
      if (transfer != nullptr) stats.AddLatency(transfer->total_time_s(), transfer->ttfb_s());
      const Fetch& f = batch.fetch(fetch);
      const uint64_t end = outcome.object_size > 0 ? outcome.object_size : f.offset + f.length;
      uint64_t delivered = 0;
      for (const Piece& p : f.pieces) {
        if (f.offset + p.fetch_offset + p.length <= end) delivered += p.length;
      }
      stats.AddBytesDelivered(delivered);
      if (outcome.object_size == 0) {
        batch.FetchSucceeded(fetch);
        return;
      }
      stats.AddFailure();
      RequestFailure past_end = Failure(outcome, st, f, "");
      past_end.cause = "beyond_end";
      past_end.error = "reaches past the end of the object (size " + std::to_string(end) +
                       " bytes) " + Progress(f, st.received);
      batch.FetchSucceededUpTo(fetch, end, past_end);
      return;
    }
    case Verdict::kCancelled:
      batch.FetchDropped(fetch);
      return;
    case Verdict::kRetry: {
      const double elapsed = std::chrono::duration<double>(Clock::now() - st.first_start).count();
      const RetryDecision next = DecideRetry(policy, st.attempts, elapsed, rng_);
      if (next.retry) {
        stats.AddRetry(outcome.cause);
        engine_->Requeue(std::move(job), next.backoff_s);
        return;
      }
      stats.AddFailure();
      batch.FetchFailed(fetch, Failure(outcome, st, batch.fetch(fetch), next.why_not));
      return;
    }
    case Verdict::kFail:
      stats.AddFailure();
      batch.FetchFailed(fetch, Failure(outcome, st, batch.fetch(fetch), ""));
      return;
  }
}

RequestFailure Engine::Worker::Failure(const Outcome& outcome, const FetchState& st, const Fetch& f,
                                       const std::string& why) {
  RequestFailure r;
  r.status = outcome.status;
  r.error = outcome.message + why + " " + Progress(f, st.received);
  r.attempts = st.attempts;
  r.cause = outcome.cause;
  r.bytes_received = st.received;
  r.offset_reached = f.offset + st.received;
  r.pinned_generation = outcome.pinned_generation;
  r.seen_generation = outcome.seen_generation;
  return r;
}

void Engine::Worker::DropAll() {
  while (!active_.empty()) {
    Outcome o;
    o.verdict = Verdict::kCancelled;
    Active a = std::move(active_.back());
    active_.pop_back();
    curl_multi_remove_handle(multi_, a.transfer->easy());
    engine_->ReleaseAttempt(a.bytes);
    a.job.batch->FetchDropped(a.job.fetch);
  }
}

}  // namespace gcsio
