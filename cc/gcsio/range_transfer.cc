#include "cc/gcsio/range_transfer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>

#include "cc/gcsio/http_text.h"

namespace gcsio {
namespace {

constexpr size_t kErrorBodyLimit = 1024;

int64_t ParseInt(std::string_view s) {
  int64_t v = -1;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return (ec == std::errc() && ptr == s.data() + s.size()) ? v : -1;
}

}  // namespace

RangeTransfer::RangeTransfer() {
  SetTransferDefaults(easy_, errbuf_, &RangeTransfer::HeaderThunk, &RangeTransfer::BodyThunk, this);
  curl_easy_setopt(easy_, CURLOPT_HTTPGET, 1L);
}

void RangeTransfer::Begin(const AttemptSetup& setup) {
  setup_ = setup;
  status_ = 0;
  content_range_.clear();
  content_length_ = -1;
  generation_ = 0;
  headers_checked_ = false;
  want_ = setup.range.length;
  object_size_ = 0;
  skip_ = 0;
  rejected_ = false;
  rejection_ = Outcome();
  error_body_.clear();
  received_ = 0;
  errbuf_[0] = '\0';
  Touch();

  ResetHeaders(setup.bearer_token);
  AddHeader("Range: bytes=" + std::to_string(setup.range.first) + "-" +
            std::to_string(setup.range.first + setup.range.length - 1));
  curl_easy_setopt(easy_, CURLOPT_URL, setup_.url.c_str());
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT_MS, setup.connect_timeout_ms);
  curl_easy_setopt(easy_, CURLOPT_BUFFERSIZE, setup.recv_buffer_bytes);
}

size_t RangeTransfer::HeaderThunk(char* data, size_t size, size_t count, void* self) {
  static_cast<RangeTransfer*>(self)->OnHeader(std::string_view(data, size * count));
  return size * count;
}

size_t RangeTransfer::BodyThunk(char* data, size_t size, size_t count, void* self) {
  return static_cast<RangeTransfer*>(self)->OnBody(data, size * count);
}

void RangeTransfer::OnHeader(std::string_view line) {
  Touch();
  if (line.substr(0, 5) == "HTTP/") {
    // A new status line: headers of any earlier answer (e.g. 100 Continue) no longer apply.
    const size_t sp = line.find(' ');
    status_ = sp == std::string_view::npos ? 0 : ParseInt(line.substr(sp + 1, 3));
    content_range_.clear();
    content_length_ = -1;
    generation_ = 0;
    return;
  }
  std::string_view v;
  if (HeaderValue(line, "content-range", &v)) {
    content_range_ = std::string(v);
  } else if (HeaderValue(line, "content-length", &v)) {
    content_length_ = ParseInt(v);
  } else if (HeaderValue(line, "x-goog-generation", &v)) {
    generation_ = std::max<int64_t>(0, ParseInt(v));
  }
}

bool RangeTransfer::AcceptHeaders() {
  Outcome check;
  if (status_ == 200) {
    // The whole object, from byte 0 (what GCS sends for gzip-transcoded objects): keep only
    // the attempt's range.
    check = CheckWholeObjectAnswer(setup_.range, content_length_);
    skip_ = setup_.range.first;
    if (check.verdict == Verdict::kSuccess) setup_.stats->AddWholeObjectAnswer();
  } else {
    check = CheckSuccessHeaders(status_, setup_.range, content_range_, content_length_);
    if (check.cause == "beyond_end") {
      // The object ends inside this attempt: keep the bytes up to its end, so that only the
      // requests reaching past it fail (not the neighbours coalesced into the same GET).
      const ContentRange cr = ParseContentRange(content_range_);
      object_size_ = cr.total;
      want_ = cr.total - setup_.range.first;
      check = Outcome();
    }
  }
  if (check.verdict == Verdict::kSuccess && setup_.pin != nullptr && generation_ > 0) {
    // The first answer naming a generation pins the object for the whole batch.
    int64_t pinned = 0;
    if (!setup_.pin->compare_exchange_strong(pinned, generation_)) {
      check = CheckGeneration(pinned, generation_);
    }
  }
  if (check.verdict != Verdict::kSuccess) {
    check.status = status_;
    rejected_ = true;
    rejection_ = std::move(check);
    return false;
  }
  headers_checked_ = true;
  return true;
}

size_t RangeTransfer::OnBody(const char* data, size_t n) {
  Touch();
  if (setup_.cancelled->load(std::memory_order_relaxed)) {
    rejected_ = true;
    rejection_.verdict = Verdict::kCancelled;
    return 0;
  }
  if (status_ < 200 || status_ >= 300) {
    const size_t keep =
        std::min(n, kErrorBodyLimit - std::min(kErrorBodyLimit, error_body_.size()));
    error_body_.append(data, keep);
    return n;
  }
  if (!headers_checked_ && !AcceptHeaders()) return 0;
  size_t skipped = 0;
  if (skip_ > 0) {
    skipped = static_cast<size_t>(std::min<uint64_t>(n, skip_));
    skip_ -= skipped;
    setup_.stats->AddBytesDiscarded(skipped);
    if (skipped == n) return n;
  }
  const size_t avail = n - skipped;
  const size_t take = static_cast<size_t>(std::min<uint64_t>(avail, wanted()));
  if (!setup_.writer->Write(setup_.body_pos + received_,
                            reinterpret_cast<const uint8_t*>(data + skipped), take)) {
    // A block's bytes do not match their checksum: corruption at rest or in transit. The retry
    // reads that block again (ScatterWriter::Resume); the range kind allows one.
    const ChecksumMismatch& m = setup_.writer->mismatch();
    rejected_ = true;
    rejection_ = MakeOutcome(Verdict::kRetry, kChecksumMismatch, status_,
                             ChecksumMessage(m.offset, m.length, m.expected, m.computed));
    return 0;
  }
  received_ += take;
  setup_.stats->AddBytesReceived(take);
  if (take == avail) return n;
  if (status_ == 200) {
    // The range is complete; the rest of the whole-object body is not needed.
    setup_.stats->AddBytesDiscarded(avail - take);
    return 0;
  }
  // A 206 longer than its own Content-Range: nothing of it can be trusted, so none of it
  // counts and the retry asks for the same bytes again (never an empty or inverted range).
  received_ = 0;
  rejected_ = true;
  rejection_.verdict = Verdict::kRetry;
  rejection_.cause = "long_body";
  rejection_.status = status_;
  rejection_.message = "HTTP " + std::to_string(status_) + " body is longer than the " +
                       std::to_string(setup_.range.length) + " bytes requested";
  return 0;
}

Outcome RangeTransfer::Finish(CURLcode code, std::string_view bucket, std::string_view object,
                              std::string_view credential) {
  if (setup_.cancelled->load()) {
    Outcome o;
    o.verdict = Verdict::kCancelled;
    return o;
  }
  if (rejected_) return rejection_;
  Outcome ok;
  ok.status = status_;
  ok.object_size = object_size_;
  // Every wanted byte arrived and was checked: a transport error after that (or the refused,
  // unneeded rest of a 200) changes nothing, and a retry would ask for an empty range.
  if (headers_checked_ && received_ == want_) return ok;
  if (code != CURLE_OK) {
    Outcome o = TransportOutcome(code, RedactCredentials(errbuf_, setup_.bearer_token));
    o.status = status_;
    return o;
  }
  if (status_ < 200 || status_ >= 300) {
    // A server may echo request headers: the token never reaches a message.
    return StatusOutcome(status_, RedactCredentials(error_body_, setup_.bearer_token), bucket,
                         object, credential, setup_.sent_generation);
  }
  if (!headers_checked_ && !AcceptHeaders()) return rejection_;
  if (received_ < want_) {
    Outcome o;
    o.status = status_;
    if (status_ == 200 && code == CURLE_OK) {
      // A complete whole-object body that ends before the range does: retrying cannot help.
      o.verdict = Verdict::kFail;
      o.cause = "range_not_honoured";
      const uint64_t object_bytes = setup_.range.first - skip_ + received_;
      o.message = "range not honoured: HTTP 200 answered the whole object, which ended after " +
                  std::to_string(object_bytes) +
                  " bytes, before bytes=" + std::to_string(setup_.range.first) + "-" +
                  std::to_string(setup_.range.first + setup_.range.length - 1) + " was complete";
      return o;
    }
    o.verdict = Verdict::kRetry;
    o.cause = "short_body";
    o.message = "HTTP " + std::to_string(status_) + " body ended after " +
                std::to_string(received_) + " of " + std::to_string(want_) + " bytes";
    return o;
  }
  return ok;
}

double RangeTransfer::total_time_s() const {
  curl_off_t us = 0;
  curl_easy_getinfo(easy_, CURLINFO_TOTAL_TIME_T, &us);
  return static_cast<double>(us) * 1e-6;
}

double RangeTransfer::ttfb_s() const {
  curl_off_t us = 0;
  curl_easy_getinfo(easy_, CURLINFO_STARTTRANSFER_TIME_T, &us);
  return static_cast<double>(us) * 1e-6;
}

}  // namespace gcsio
