#include "cc/gcsio/upload_payload.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cc/gcsio/block_sums.h"
#include "cc/gcsio/crc32c.h"

namespace gcsio {

UploadPayload::UploadPayload(const std::vector<UploadSpan>& spans) {
  for (size_t i = 0; i < spans.size(); ++i) {
    const UploadSpan& s = spans[i];
    if (s.size == 0) continue;
    if (s.data == nullptr) {
      throw std::invalid_argument("upload span " + std::to_string(i) + " of " +
                                  std::to_string(spans.size()) + " is null with " +
                                  std::to_string(s.size) + " bytes");
    }
    spans_.push_back(s);
    starts_.push_back(size_);
    size_ += s.size;
  }
}

size_t UploadPayload::Read(uint64_t offset, uint8_t* dst, size_t n) const {
  if (offset >= size_ || n == 0) return 0;
  // The span holding `offset`: the last one starting at or before it (starts_[0] == 0).
  size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) -
                                 starts_.begin()) -
             1;
  size_t done = 0;
  uint64_t within = offset - starts_[i];
  while (done < n && i < spans_.size()) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(spans_[i].size - within, n - done));
    std::memcpy(dst + done, spans_[i].data + within, take);
    done += take;
    within = 0;
    ++i;
  }
  return done;
}

uint32_t UploadPayload::Crc32c() const {
  uint32_t crc = 0;
  for (const UploadSpan& s : spans_) crc = gcsio::Crc32c(s.data, s.size, crc);
  return crc;
}

uint32_t UploadPayload::BlockCrc32c(const std::vector<uint64_t>& starts,
                                    std::vector<uint32_t>* block_crcs) const {
  block_crcs->clear();
  if (starts.empty()) return Crc32c();
  BlockSums layout{size_, starts, {}};
  layout.crcs.resize(starts.size());
  const std::string problem = layout.Problem();
  if (!problem.empty()) throw std::invalid_argument("upload block checksums: " + problem);
  block_crcs->reserve(starts.size());
  uint32_t whole = 0;
  size_t span = 0;
  uint64_t span_pos = 0;  // bytes of spans_[span] already read
  for (size_t b = 0; b < starts.size(); ++b) {
    uint64_t left = layout.BlockEnd(b) - starts[b];
    const uint64_t block_len = left;
    uint32_t crc = 0;
    while (left > 0) {
      const UploadSpan& s = spans_[span];
      const uint64_t take = std::min(left, s.size - span_pos);
      crc = gcsio::Crc32c(s.data + span_pos, take, crc);
      left -= take;
      span_pos += take;
      if (span_pos == s.size) {
        ++span;
        span_pos = 0;
      }
    }
    block_crcs->push_back(crc);
    whole = b == 0 ? crc : Crc32cCombine(whole, crc, block_len);
  }
  return whole;
}

}  // namespace gcsio
