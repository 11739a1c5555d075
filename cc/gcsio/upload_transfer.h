// One libcurl easy handle doing the requests of resumable uploads, one at a time: the session
// start (POST), a chunk (PUT with Content-Range a-b/total, body read straight from the caller's
// spans, UploadPayload, from any object offset) and the status query (PUT with Content-Range
// */total, empty body). It records what came back (status, Location, Range, the start of the body);
// the upload request kind (upload_kind.h) judges it.
#ifndef CC_GCSIO_UPLOAD_TRANSFER_H_
#define CC_GCSIO_UPLOAD_TRANSFER_H_

#include <curl/curl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "cc/gcsio/easy_transfer.h"
#include "cc/gcsio/upload_payload.h"

namespace gcsio {

enum class UploadStep { kStart, kChunk, kQuery };

struct UploadRequestSetup {
  UploadStep step = UploadStep::kStart;
  std::string url;                         // the start URL, or the session URL
  std::string bearer_token;                // "" sends no Authorization header
  uint64_t total = 0;                      // the object's size (bytes)
  const UploadPayload* payload = nullptr;  // kChunk: the object's bytes (caller memory)
  uint64_t first = 0;                      // kChunk: the object offset of the chunk's first byte
  uint64_t length = 0;                     // kChunk: chunk bytes
  long connect_timeout_ms = 10000;
  const std::atomic<bool>* cancelled = nullptr;
};

struct UploadAnswer {
  CURLcode code = CURLE_OK;
  std::string transport_error;  // libcurl's message when code != CURLE_OK
  long status = 0;
  std::string location;  // Location header (the session URL of a start)
  std::string range;     // Range header of a 308
  std::string body;      // the start of the body (kBodyLimit bytes at most)
  uint64_t sent = 0;     // body bytes libcurl read from caller memory
};

class UploadTransfer : public EasyTransfer {
 public:
  static constexpr size_t kBodyLimit = 64 << 10;
  // libcurl's send buffer per request (its default is 64 KiB): fewer read callbacks per byte.
  static constexpr long kSendBufferBytes = 1L << 20;

  // Configures the handle for a new request (connections stay cached in the multi handle).
  void Begin(const UploadRequestSetup& setup);
  UploadAnswer Finish(CURLcode code);
  const UploadRequestSetup& setup() const { return setup_; }

 private:
  static size_t HeaderThunk(char* data, size_t size, size_t count, void* self);
  static size_t BodyThunk(char* data, size_t size, size_t count, void* self);
  static size_t ReadThunk(char* data, size_t size, size_t count, void* self);

  UploadRequestSetup setup_;
  UploadAnswer answer_;
  uint64_t read_pos_ = 0;
};

}  // namespace gcsio

#endif  // CC_GCSIO_UPLOAD_TRANSFER_H_
