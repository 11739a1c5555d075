#include "cc/gcsio/scatter_writer.h"

#include <algorithm>
#include <cstring>

namespace gcsio {

void ScatterWriter::Write(uint64_t fetch_pos, const uint8_t* data, size_t n) {
  const uint64_t end = fetch_pos + n;
  const std::vector<Piece>& pieces = fetch_->pieces;
  for (size_t i = cursor_; i < pieces.size() && pieces[i].fetch_offset < end; ++i) {
    const Piece& p = pieces[i];
    const uint64_t lo = std::max(p.fetch_offset, fetch_pos);
    const uint64_t hi = std::min(p.fetch_offset + p.length, end);
    if (lo >= hi) continue;
    std::memcpy((*dests_)[p.request] + p.dest_offset + (lo - p.fetch_offset),
                data + (lo - fetch_pos), hi - lo);
  }
  while (cursor_ < pieces.size() && pieces[cursor_].fetch_offset + pieces[cursor_].length <= end) {
    ++cursor_;
  }
}

}  // namespace gcsio
