// Copies a fetch body, as it streams in, into the destinations of the requests it serves, and
// checks the CRC-32C of every block of it when the object has block checksums.
#ifndef CC_GCSIO_SCATTER_WRITER_H_
#define CC_GCSIO_SCATTER_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cc/gcsio/block_sums.h"
#include "cc/gcsio/range_plan.h"

namespace gcsio {

// A block whose bytes did not match its recorded CRC-32C.
struct ChecksumMismatch {
  size_t block = 0;
  uint64_t offset = 0;  // the block's first byte in the object
  uint64_t length = 0;  // bytes
  uint32_t expected = 0;
  uint32_t computed = 0;
};

class ScatterWriter {
 public:
  // `dests[r]` is the destination of request r; it must outlive the writer. `sums` (may be
  // null: nothing is checked) are the block checksums of the fetch's object; the fetch must
  // then start and end on block boundaries (PlanFetches makes it so).
  ScatterWriter(const Fetch* fetch, const std::vector<uint8_t*>* dests,
                const BlockSums* sums = nullptr);

  // Copies `n` body bytes that start at `fetch_pos` (offset within the fetch body) into every
  // destination that covers them, and runs the block checksum over them in the same pass.
  // Positions follow on from the previous call (Resume says where a retry starts). Returns
  // false when a block just completed with the wrong CRC-32C (see mismatch()): the block's
  // bytes already sit in the destinations and must not be used; the next Resume starts at
  // that block again.
  bool Write(uint64_t fetch_pos, const uint8_t* data, size_t n);

  // Where the next attempt starts, given the body bytes counted as received so far: the same
  // position when the checksum state continues from it, else the start of the block holding
  // it (a rejected answer or a bad block: that block is fetched again whole).
  uint64_t Resume(uint64_t received);

  bool verifies() const { return sums_ != nullptr; }
  const ChecksumMismatch& mismatch() const { return mismatch_; }

 private:
  void StartBlockAt(uint64_t fetch_pos);

  const Fetch* fetch_;
  const std::vector<uint8_t*>* dests_;
  size_t cursor_ = 0;  // pieces before it are fully written
  // Checksum state (only with sums_): the body position the next byte must have, the block
  // it is in, where that block ends (body position) and the CRC-32C of its bytes so far.
  const BlockSums* sums_;
  uint64_t pos_ = 0;
  size_t block_ = 0;
  uint64_t block_end_ = 0;
  uint32_t crc_ = 0;
  ChecksumMismatch mismatch_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_SCATTER_WRITER_H_
