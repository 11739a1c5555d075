// Block checksums of one object: the CRC-32C of each block, written by the save path and checked
// by the range reader on every byte it delivers.
//
// An object of `size` bytes is cut into blocks at `starts` (ascending, starts[0] == 0, each
// < size); block i is [starts[i], starts[i + 1]) and the last ends at `size`. The writer cuts at
// every item boundary and every `block_bytes` inside an item, so reading a whole item never
// reads a byte it does not need, and a partial read widens by less than one block per end.
// Where they live and why: docs/design.md, "Integrity guarantees".
#ifndef CC_GCSIO_BLOCK_SUMS_H_
#define CC_GCSIO_BLOCK_SUMS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gcsio {

struct BlockSums {
  uint64_t size = 0;             // the object's size (bytes)
  std::vector<uint64_t> starts;  // block starts (bytes), ascending, starts[0] == 0
  std::vector<uint32_t> crcs;    // CRC-32C of each block

  // "" when well formed, else what is wrong (named in ValueErrors).
  std::string Problem() const;
  size_t count() const { return starts.size(); }
  // The block holding byte `offset` (< size).
  size_t BlockAt(uint64_t offset) const;
  uint64_t BlockEnd(size_t block) const {
    return block + 1 < starts.size() ? starts[block + 1] : size;
  }
  // The first block start >= `offset`, or `size` when none is.
  uint64_t StartAtOrAfter(uint64_t offset) const;
};

}  // namespace gcsio

#endif  // CC_GCSIO_BLOCK_SUMS_H_
