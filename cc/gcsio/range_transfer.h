// The handle of the ranged-GET request kind (range_kind.h): performs GET attempts for fetches,
// writes validated body bytes through a ScatterWriter and judges each finished attempt.
#ifndef CC_GCSIO_RANGE_TRANSFER_H_
#define CC_GCSIO_RANGE_TRANSFER_H_

#include <curl/curl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "cc/gcsio/easy_transfer.h"
#include "cc/gcsio/range_response.h"
#include "cc/gcsio/scatter_writer.h"
#include "cc/gcsio/transfer_stats.h"

namespace gcsio {

struct AttemptSetup {
  std::string url;
  AttemptRange range;        // object bytes this attempt asks for
  uint64_t body_pos = 0;     // where range.first sits within the fetch body
  std::string bearer_token;  // "" sends no Authorization header
  long connect_timeout_ms = 10000;
  long recv_buffer_bytes = 256 << 10;
  ScatterWriter* writer = nullptr;
  const std::atomic<bool>* cancelled = nullptr;
  TransferStats* stats = nullptr;
  // The object's generation pin, shared by every GET of it in the batch (see Batch::pin_of).
  std::atomic<int64_t>* pin = nullptr;
  int64_t sent_generation = 0;  // the generation= this GET's URL carries, 0 if none
};

class RangeTransfer : public EasyTransfer {
 public:
  RangeTransfer();  // throws std::runtime_error if libcurl cannot make a handle

  // Configures the handle for a new attempt and clears the previous attempt's state.
  void Begin(const AttemptSetup& setup);

  // Judges a finished attempt from libcurl's result code. `credential` is named in 401/403
  // messages.
  Outcome Finish(CURLcode code, std::string_view bucket, std::string_view object,
                 std::string_view credential);

  // Validated body bytes this attempt wrote into destinations.
  uint64_t received() const { return received_; }
  // x-goog-generation of the answer, 0 if absent.
  int64_t generation() const { return generation_; }
  // The object's size when a 206 ended at the object's end before the attempt's end, else 0.
  uint64_t object_size() const { return object_size_; }
  double total_time_s() const;
  double ttfb_s() const;

 private:
  static size_t HeaderThunk(char* data, size_t size, size_t count, void* self);
  static size_t BodyThunk(char* data, size_t size, size_t count, void* self);
  void OnHeader(std::string_view line);
  size_t OnBody(const char* data, size_t n);
  // Validates status, headers and generation before the first body byte is accepted; false
  // (with rejection_ set) refuses the answer.
  bool AcceptHeaders();
  // Bytes this attempt still wants.
  uint64_t wanted() const { return want_ - received_; }

  AttemptSetup setup_;
  long status_ = 0;
  std::string content_range_;
  int64_t content_length_ = -1;
  int64_t generation_ = 0;
  bool headers_checked_ = false;
  uint64_t want_ = 0;         // bytes this attempt keeps (range.length, less past the end)
  uint64_t object_size_ = 0;  // see object_size()
  uint64_t skip_ = 0;         // body bytes still to discard (200 whole-object answers)
  bool rejected_ = false;
  Outcome rejection_;
  std::string error_body_;
  uint64_t received_ = 0;
};

}  // namespace gcsio

#endif  // CC_GCSIO_RANGE_TRANSFER_H_
