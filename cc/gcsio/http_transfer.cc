#include "cc/gcsio/http_transfer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>

namespace gcsio {
namespace {

constexpr size_t kErrorBodyLimit = 1024;

// Case-insensitive "name:" prefix match; returns the trimmed value.
bool HeaderValue(std::string_view line, std::string_view name, std::string_view* value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  std::string_view v = line.substr(name.size() + 1);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
  *value = v;
  return true;
}

int64_t ParseInt(std::string_view s) {
  int64_t v = -1;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return (ec == std::errc() && ptr == s.data() + s.size()) ? v : -1;
}

}  // namespace

HttpTransfer::HttpTransfer() : easy_(curl_easy_init()) {
  if (easy_ == nullptr) throw std::runtime_error("curl_easy_init failed");
  errbuf_[0] = '\0';
  curl_easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy_, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(easy_, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(easy_, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy_, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy_, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy_, CURLOPT_USERAGENT, "gcsckpt-gcsio/1.0");
  curl_easy_setopt(easy_, CURLOPT_ERRORBUFFER, errbuf_);
  curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, &HttpTransfer::HeaderThunk);
  curl_easy_setopt(easy_, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &HttpTransfer::BodyThunk);
  curl_easy_setopt(easy_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(easy_, CURLOPT_PRIVATE, this);
}

HttpTransfer::~HttpTransfer() {
  curl_easy_cleanup(easy_);
  curl_slist_free_all(headers_);
}

void HttpTransfer::Begin(const AttemptSetup& setup) {
  setup_ = setup;
  status_ = 0;
  content_range_.clear();
  content_length_ = -1;
  generation_ = 0;
  headers_checked_ = false;
  rejected_ = false;
  rejection_ = Outcome();
  error_body_.clear();
  received_ = 0;
  errbuf_[0] = '\0';
  last_activity_ = std::chrono::steady_clock::now();

  curl_slist_free_all(headers_);
  headers_ = nullptr;
  const std::string range = "Range: bytes=" + std::to_string(setup.range.first) + "-" +
                            std::to_string(setup.range.first + setup.range.length - 1);
  headers_ = curl_slist_append(headers_, range.c_str());
  if (!setup.bearer_token.empty()) {
    const std::string auth = "Authorization: Bearer " + setup.bearer_token;
    headers_ = curl_slist_append(headers_, auth.c_str());
  }
  curl_easy_setopt(easy_, CURLOPT_URL, setup_.url.c_str());
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT_MS, setup.connect_timeout_ms);
  curl_easy_setopt(easy_, CURLOPT_BUFFERSIZE, setup.recv_buffer_bytes);
}

size_t HttpTransfer::HeaderThunk(char* data, size_t size, size_t count, void* self) {
  static_cast<HttpTransfer*>(self)->OnHeader(std::string_view(data, size * count));
  return size * count;
}

size_t HttpTransfer::BodyThunk(char* data, size_t size, size_t count, void* self) {
  return static_cast<HttpTransfer*>(self)->OnBody(data, size * count);
}

void HttpTransfer::OnHeader(std::string_view line) {
  last_activity_ = std::chrono::steady_clock::now();
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

size_t HttpTransfer::OnBody(const char* data, size_t n) {
  last_activity_ = std::chrono::steady_clock::now();
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
  if (!headers_checked_) {
    Outcome check = CheckSuccessHeaders(status_, setup_.range, content_range_, content_length_);
    if (check.verdict != Verdict::kSuccess) {
      rejected_ = true;
      rejection_ = std::move(check);
      return 0;
    }
    headers_checked_ = true;
  }
  const uint64_t room = setup_.range.length - received_;
  const size_t take = static_cast<size_t>(std::min<uint64_t>(n, room));
  setup_.writer->Write(setup_.body_pos + received_, reinterpret_cast<const uint8_t*>(data), take);
  received_ += take;
  setup_.stats->AddBytesReceived(take);
  if (take < n) {
    rejected_ = true;
    rejection_.verdict = Verdict::kRetry;
    rejection_.cause = "long_body";
    rejection_.status = status_;
    rejection_.message = "HTTP " + std::to_string(status_) + " body is longer than the " +
                         std::to_string(setup_.range.length) + " bytes requested";
    return 0;
  }
  return n;
}

Outcome HttpTransfer::Finish(CURLcode code, std::string_view bucket, std::string_view object,
                             std::string_view credential) {
  if (setup_.cancelled->load()) {
    Outcome o;
    o.verdict = Verdict::kCancelled;
    return o;
  }
  if (rejected_) return rejection_;
  if (code != CURLE_OK) {
    Outcome o = TransportOutcome(code, errbuf_);
    o.status = status_;
    return o;
  }
  if (status_ < 200 || status_ >= 300) {
    return StatusOutcome(status_, error_body_, bucket, object, credential);
  }
  if (!headers_checked_) {
    Outcome check = CheckSuccessHeaders(status_, setup_.range, content_range_, content_length_);
    if (check.verdict != Verdict::kSuccess) return check;
  }
  if (received_ < setup_.range.length) {
    Outcome o;
    o.verdict = Verdict::kRetry;
    o.cause = "short_body";
    o.status = status_;
    o.message = "HTTP " + std::to_string(status_) + " body ended after " +
                std::to_string(received_) + " of " + std::to_string(setup_.range.length) + " bytes";
    return o;
  }
  Outcome ok;
  ok.status = status_;
  return ok;
}

long HttpTransfer::new_connections() const {
  long n = 0;
  curl_easy_getinfo(easy_, CURLINFO_NUM_CONNECTS, &n);
  return n;
}

double HttpTransfer::total_time_s() const {
  curl_off_t us = 0;
  curl_easy_getinfo(easy_, CURLINFO_TOTAL_TIME_T, &us);
  return static_cast<double>(us) * 1e-6;
}

double HttpTransfer::ttfb_s() const {
  curl_off_t us = 0;
  curl_easy_getinfo(easy_, CURLINFO_STARTTRANSFER_TIME_T, &us);
  return static_cast<double>(us) * 1e-6;
}

}  // namespace gcsio
