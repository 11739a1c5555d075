// Copies a fetch body, as it streams in, into the destinations of the requests it serves.
#ifndef CC_GCSIO_SCATTER_WRITER_H_
#define CC_GCSIO_SCATTER_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cc/gcsio/range_plan.h"

namespace gcsio {

class ScatterWriter {
 public:
  // `dests[r]` is the destination of request r; it must outlive the writer.
  ScatterWriter(const Fetch* fetch, const std::vector<uint8_t*>* dests)
      : fetch_(fetch), dests_(dests) {}

  // Copies `n` body bytes that start at `fetch_pos` (offset within the fetch body) into every
  // destination that covers them. Positions must not decrease between calls (a retry resumes
  // where the last attempt stopped).
  void Write(uint64_t fetch_pos, const uint8_t* data, size_t n);

 private:
  const Fetch* fetch_;
  const std::vector<uint8_t*>* dests_;
  size_t cursor_ = 0;  // pieces before it are fully written
};

}  // namespace gcsio

#endif  // CC_GCSIO_SCATTER_WRITER_H_
