#include "cc/gcsio/upload_transfer.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "cc/gcsio/http_text.h"

namespace gcsio {
namespace {

// The body of a session start: the object resource (the name also rides in the URL).
constexpr char kStartBody[] = "{}";

}  // namespace

void UploadTransfer::Begin(const UploadRequestSetup& setup) {
  setup_ = setup;
  answer_ = UploadAnswer();
  read_pos_ = 0;
  errbuf_[0] = '\0';
  Touch();
  // A request of another kind may follow on the same handle: start from libcurl's defaults
  // (the connection cache lives in the multi handle and survives).
  curl_easy_reset(easy_);
  SetTransferDefaults(easy_, errbuf_, &UploadTransfer::HeaderThunk, &UploadTransfer::BodyThunk,
                      this);
  curl_easy_setopt(easy_, CURLOPT_URL, setup_.url.c_str());
  curl_easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT_MS, setup.connect_timeout_ms);
  curl_easy_setopt(easy_, CURLOPT_UPLOAD_BUFFERSIZE, kSendBufferBytes);

  ResetHeaders(setup.bearer_token);
  AddHeader("Expect:");  // no "Expect: 100-continue" round trip before large bodies
  const std::string total = std::to_string(setup.total);
  if (setup.step == UploadStep::kStart) {
    AddHeader("Content-Type: application/json; charset=UTF-8");
    AddHeader("X-Upload-Content-Type: application/octet-stream");
    AddHeader("X-Upload-Content-Length: " + total);
    curl_easy_setopt(easy_, CURLOPT_POST, 1L);
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, kStartBody);
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(sizeof(kStartBody) - 1));
  } else {
    std::string range = "Content-Range: bytes ";
    if (setup.step == UploadStep::kQuery || setup.length == 0) {
      range += "*/" + total;  // a status query, or the completion of an empty object
    } else {
      range += std::to_string(setup.first) + "-" + std::to_string(setup.first + setup.length - 1) +
               "/" + total;
    }
    AddHeader(range);
    AddHeader("Content-Type: application/octet-stream");
    const uint64_t length = setup.step == UploadStep::kChunk ? setup.length : 0;
    curl_easy_setopt(easy_, CURLOPT_UPLOAD, 1L);  // PUT
    curl_easy_setopt(easy_, CURLOPT_READFUNCTION, &UploadTransfer::ReadThunk);
    curl_easy_setopt(easy_, CURLOPT_READDATA, this);
    curl_easy_setopt(easy_, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(length));
  }
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_);
}

size_t UploadTransfer::HeaderThunk(char* data, size_t size, size_t count, void* self) {
  auto* t = static_cast<UploadTransfer*>(self);
  const std::string_view line(data, size * count);
  t->Touch();
  if (line.substr(0, 5) == "HTTP/") {
    // A new status line: headers of an earlier answer (100 Continue) no longer apply.
    const size_t sp = line.find(' ');
    t->answer_.status = 0;
    if (sp != std::string_view::npos && sp + 4 <= line.size()) {
      t->answer_.status = std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    }
    t->answer_.location.clear();
    t->answer_.range.clear();
    return size * count;
  }
  std::string_view v;
  if (HeaderValue(line, "location", &v)) {
    t->answer_.location = std::string(v);
  } else if (HeaderValue(line, "range", &v)) {
    t->answer_.range = std::string(v);
  }
  return size * count;
}

size_t UploadTransfer::BodyThunk(char* data, size_t size, size_t count, void* self) {
  auto* t = static_cast<UploadTransfer*>(self);
  t->Touch();
  if (t->setup_.cancelled != nullptr && t->setup_.cancelled->load(std::memory_order_relaxed)) {
    return 0;
  }
  const size_t n = size * count;
  const size_t keep = std::min(n, kBodyLimit - std::min(kBodyLimit, t->answer_.body.size()));
  t->answer_.body.append(data, keep);
  return n;
}

size_t UploadTransfer::ReadThunk(char* data, size_t size, size_t count, void* self) {
  auto* t = static_cast<UploadTransfer*>(self);
  t->Touch();
  if (t->setup_.cancelled != nullptr && t->setup_.cancelled->load(std::memory_order_relaxed)) {
    return CURL_READFUNC_ABORT;
  }
  if (t->setup_.step != UploadStep::kChunk) return 0;
  const uint64_t left = t->setup_.length - t->read_pos_;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(left, size * count));
  // Into libcurl's send buffer, across span boundaries (a resumed chunk starts mid-span).
  const size_t got =
      t->setup_.payload->Read(t->setup_.first + t->read_pos_, reinterpret_cast<uint8_t*>(data), n);
  if (got != n) return CURL_READFUNC_ABORT;  // the chunk runs past the object: never sent short
  t->read_pos_ += n;
  t->answer_.sent = t->read_pos_;
  return n;
}

UploadAnswer UploadTransfer::Finish(CURLcode code) {
  answer_.code = code;
  if (code != CURLE_OK) answer_.transport_error = errbuf_;
  return answer_;
}

}  // namespace gcsio
