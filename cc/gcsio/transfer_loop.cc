#include "cc/gcsio/transfer_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace gcsio {
namespace {

constexpr auto kPollCap = std::chrono::milliseconds(100);

}  // namespace

TransferLoop::TransferLoop(TransferDriver* driver, int index)
    : driver_(driver), index_(index), multi_(curl_multi_init()), rng_(std::random_device{}()) {
  if (multi_ == nullptr) throw std::runtime_error("curl_multi_init failed");
  // Keep enough idle connections cached that every request slot can reuse one.
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, driver->MaxConnects(index));
}

TransferLoop::~TransferLoop() {
  Join();
  active_.clear();
  spare_.clear();
  curl_multi_cleanup(multi_);
}

void TransferLoop::StartThread() {
  thread_ = std::thread([this] { Run(); });
}

void TransferLoop::Join() {
  if (thread_.joinable()) thread_.join();
}

void TransferLoop::Wake() { curl_multi_wakeup(multi_); }

void TransferLoop::Run() {
  while (true) {
    DriverJob job;
    uint64_t bytes = 0;
    while (driver_->TakeJob(index_, static_cast<int>(active_.size()), &job, &bytes)) {
      Start(std::move(job), bytes);
    }
    if (driver_->stopping()) break;
    if (active_.empty()) {
      driver_->WaitForWork(index_);
      continue;
    }
    int running = 0;
    curl_multi_perform(multi_, &running);
    CollectFinished();
    CheckStallsAndCancels();
    if (!active_.empty()) {
      const auto wait = driver_->TimeToNextRetry(kPollCap);
      const int ms =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
      curl_multi_poll(multi_, nullptr, 0, std::max(ms, 1), nullptr);
    }
  }
  DropAll();
}

std::unique_ptr<EasyTransfer> TransferLoop::TakeSpare(RequestKind* kind) {
  for (size_t i = spare_.size(); i-- > 0;) {
    if (spare_[i].first != kind) continue;
    std::unique_ptr<EasyTransfer> t = std::move(spare_[i].second);
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
    return t;
  }
  return kind->NewTransfer();
}

void TransferLoop::Start(DriverJob job, uint64_t bytes) {
  RequestKind* kind = job.kind;
  AttemptClock& clock = kind->Clock(job);
  if (clock.attempts == 0) clock.first_start = std::chrono::steady_clock::now();
  ++clock.attempts;
  std::string token;
  try {
    token = driver_->Token();
  } catch (const std::exception& e) {
    driver_->ReleaseAttempt(bytes);
    AttemptEnd end;
    end.local =
        MakeOutcome(Verdict::kRetry, "token", 0, std::string("token_provider failed: ") + e.what());
    driver_->Settle(std::move(job), end, rng_);
    return;
  }
  std::unique_ptr<EasyTransfer> transfer = TakeSpare(kind);
  kind->Prepare(job, transfer.get(), std::move(token), bytes);
  curl_multi_add_handle(multi_, transfer->easy());
  driver_->stats_.AddRequest();
  active_.push_back(Active{std::move(job), std::move(transfer), bytes});
}

void TransferLoop::CollectFinished() {
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    for (size_t i = 0; i < active_.size(); ++i) {
      if (active_[i].transfer->easy() != msg->easy_handle) continue;
      AttemptEnd end;
      end.finished = true;
      end.code = msg->data.result;
      End(i, std::move(end));
      break;
    }
  }
}

void TransferLoop::CheckStallsAndCancels() {
  const auto now = std::chrono::steady_clock::now();
  const double stall_s = driver_->options_.stall_timeout_s;
  const auto stall = std::chrono::duration<double>(stall_s);
  for (size_t i = active_.size(); i-- > 0;) {
    const bool cancelled = active_[i].job.work->cancelled();
    if (!cancelled && now - active_[i].transfer->last_activity() <= stall) continue;
    AttemptEnd end;
    if (cancelled) {
      end.local.verdict = Verdict::kCancelled;
    } else {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "stalled: no bytes for %.1f s", stall_s);
      end.local = MakeOutcome(Verdict::kRetry, "stall", 0, buf);
    }
    End(i, std::move(end));
  }
}

void TransferLoop::End(size_t slot, AttemptEnd end) {
  Active a = std::move(active_[slot]);
  active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(slot));
  curl_multi_remove_handle(multi_, a.transfer->easy());
  driver_->ReleaseAttempt(a.bytes);
  if (end.finished) driver_->stats_.AddConnections(a.transfer->new_connections());
  end.transfer = a.transfer.get();
  const RequestKind* kind = a.job.kind;
  driver_->Settle(std::move(a.job), end, rng_);
  spare_.emplace_back(kind, std::move(a.transfer));
}

void TransferLoop::DropAll() {
  while (!active_.empty()) {
    Active a = std::move(active_.back());
    active_.pop_back();
    curl_multi_remove_handle(multi_, a.transfer->easy());
    driver_->ReleaseAttempt(a.bytes);
    a.job.kind->Drop(a.job, /*closed=*/false);
  }
}

}  // namespace gcsio
