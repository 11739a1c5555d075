#include "cc/gcsio/scatter_writer.h"

#include <algorithm>
#include <cstring>

#include "cc/gcsio/crc32c.h"

namespace gcsio {

ScatterWriter::ScatterWriter(const Fetch* fetch, const std::vector<uint8_t*>* dests,
                             const BlockSums* sums)
    : fetch_(fetch), dests_(dests), sums_(sums) {
  if (sums_ != nullptr && fetch_->length > 0) StartBlockAt(0);
}

void ScatterWriter::StartBlockAt(uint64_t fetch_pos) {
  const uint64_t at = fetch_->offset + fetch_pos;
  block_ = sums_->BlockAt(at);
  pos_ = sums_->starts[block_] - fetch_->offset;
  block_end_ = sums_->BlockEnd(block_) - fetch_->offset;
  crc_ = 0;
}

bool ScatterWriter::Write(uint64_t fetch_pos, const uint8_t* data, size_t n) {
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
  if (sums_ == nullptr) return true;
  // The bytes were just copied, so they are still in cache for the checksum.
  uint64_t pos = fetch_pos;
  while (pos < end) {
    const uint64_t take = std::min(end, block_end_) - pos;
    crc_ = Crc32c(data + (pos - fetch_pos), static_cast<size_t>(take), crc_);
    pos += take;
    if (pos < block_end_) break;
    const uint32_t expected = sums_->crcs[block_];
    if (crc_ != expected) {
      const uint64_t start = sums_->starts[block_];
      mismatch_ = ChecksumMismatch{block_, start, sums_->BlockEnd(block_) - start, expected, crc_};
      StartBlockAt(start - fetch_->offset);  // the next attempt reads this block again
      cursor_ = 0;                           // and writes its pieces again
      return false;
    }
    if (pos >= fetch_->length) {
      pos_ = pos;
      crc_ = 0;
      return true;
    }
    StartBlockAt(pos);
  }
  pos_ = pos;
  return true;
}

uint64_t ScatterWriter::Resume(uint64_t received) {
  if (sums_ == nullptr || received == pos_) return received;
  // Only whole blocks are ever trusted: a rewind starts the block over, pieces included.
  if (received >= fetch_->length) return received;
  StartBlockAt(std::min(received, pos_));
  cursor_ = 0;
  return pos_;
}

}  // namespace gcsio
