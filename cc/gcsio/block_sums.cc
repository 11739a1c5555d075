#include "cc/gcsio/block_sums.h"

#include <algorithm>

namespace gcsio {

std::string BlockSums::Problem() const {
  if (starts.size() != crcs.size()) {
    return std::to_string(starts.size()) + " block starts but " + std::to_string(crcs.size()) +
           " checksums";
  }
  if (size == 0) return starts.empty() ? "" : "an empty object has no blocks";
  if (starts.empty() || starts[0] != 0) return "the first block must start at byte 0";
  for (size_t i = 1; i < starts.size(); ++i) {
    if (starts[i] <= starts[i - 1] || starts[i] >= size) {
      return "block start " + std::to_string(starts[i]) + " (block " + std::to_string(i) +
             ") is not ascending inside the object's " + std::to_string(size) + " bytes";
    }
  }
  return "";
}

size_t BlockSums::BlockAt(uint64_t offset) const {
  // The last start <= offset.
  return static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), offset) -
                             starts.begin()) -
         1;
}

uint64_t BlockSums::StartAtOrAfter(uint64_t offset) const {
  auto it = std::lower_bound(starts.begin(), starts.end(), offset);
  return it == starts.end() ? size : *it;
}

}  // namespace gcsio
