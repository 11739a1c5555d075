// The part every request handle shares, whatever its kind (a ranged GET, an upload request):
// one libcurl easy handle with its error buffer and header list, the time it last saw a byte
// (the driver's stall check) and the connections it opened. RangeTransfer and UploadTransfer
// derive from it; TransferLoop keeps idle ones in its spare pool.
#ifndef CC_GCSIO_EASY_TRANSFER_H_
#define CC_GCSIO_EASY_TRANSFER_H_

#include <curl/curl.h>

#include <chrono>
#include <string>

namespace gcsio {

// curl_global_init, once per process (before the first handle).
void GlobalCurlInitOnce();

// The options every request handle starts from: no signals, HTTP/1.1, no redirects, TCP_NODELAY
// and keep-alive, the user agent, libcurl's message into `errbuf` (CURL_ERROR_SIZE bytes),
// header lines to `on_header` and body bytes to `on_body` (both called with `self`, which
// CURLINFO_PRIVATE also returns).
void SetTransferDefaults(CURL* easy, char* errbuf, curl_write_callback on_header,
                         curl_write_callback on_body, void* self);

class EasyTransfer {
 public:
  EasyTransfer();  // throws std::runtime_error if libcurl cannot make a handle
  virtual ~EasyTransfer();
  EasyTransfer(const EasyTransfer&) = delete;
  EasyTransfer& operator=(const EasyTransfer&) = delete;

  CURL* easy() const { return easy_; }
  // When the attempt last saw a byte either way (stall detection).
  std::chrono::steady_clock::time_point last_activity() const { return last_activity_; }
  // CURLINFO_NUM_CONNECTS of the last attempt: connections it opened (0: it reused one).
  long new_connections() const;

 protected:
  void Touch() { last_activity_ = std::chrono::steady_clock::now(); }
  // Starts a new header list: empty, or `Authorization: Bearer <token>` for a non-empty token.
  void ResetHeaders(const std::string& bearer_token);
  void AddHeader(const std::string& line) { headers_ = curl_slist_append(headers_, line.c_str()); }

  CURL* easy_;
  curl_slist* headers_ = nullptr;
  char errbuf_[CURL_ERROR_SIZE];
  std::chrono::steady_clock::time_point last_activity_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_EASY_TRANSFER_H_
