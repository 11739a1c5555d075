#include "cc/gcsio/easy_transfer.h"

#include <mutex>
#include <stdexcept>

namespace gcsio {

void GlobalCurlInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

void SetTransferDefaults(CURL* easy, char* errbuf, curl_write_callback on_header,
                         curl_write_callback on_body, void* self) {
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "gcsckpt-gcsio/1.0");
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, self);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, self);
  curl_easy_setopt(easy, CURLOPT_PRIVATE, self);
}

EasyTransfer::EasyTransfer() : easy_(curl_easy_init()) {
  if (easy_ == nullptr) throw std::runtime_error("curl_easy_init failed");
  errbuf_[0] = '\0';
}

EasyTransfer::~EasyTransfer() {
  curl_easy_cleanup(easy_);
  curl_slist_free_all(headers_);
}

long EasyTransfer::new_connections() const {
  long n = 0;
  curl_easy_getinfo(easy_, CURLINFO_NUM_CONNECTS, &n);
  return n;
}

void EasyTransfer::ResetHeaders(const std::string& bearer_token) {
  curl_slist_free_all(headers_);
  headers_ = nullptr;
  if (!bearer_token.empty()) AddHeader("Authorization: Bearer " + bearer_token);
}

}  // namespace gcsio
