// The bytes of one upload: spans of caller memory (pointer, length) whose concatenation is the
// object, so a save can send tensor storage and small serializer records without first copying
// them into one staging buffer. A single buffer is one span: there is one code path.
#ifndef CC_GCSIO_UPLOAD_PAYLOAD_H_
#define CC_GCSIO_UPLOAD_PAYLOAD_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gcsio {

struct UploadSpan {
  const uint8_t* data = nullptr;  // caller memory: valid and unchanged until the upload finished
  uint64_t size = 0;              // bytes
};

class UploadPayload {
 public:
  UploadPayload() = default;  // empty: zero bytes
  // Throws std::invalid_argument naming the span for a null pointer with size > 0. Empty spans
  // are dropped (they add no byte).
  explicit UploadPayload(const std::vector<UploadSpan>& spans);

  uint64_t size() const { return size_; }
  size_t span_count() const { return spans_.size(); }  // non-empty spans

  // Copies up to `n` bytes starting at object offset `offset` into `dst` (across span
  // boundaries); returns the bytes copied (fewer only at the end of the object).
  size_t Read(uint64_t offset, uint8_t* dst, size_t n) const;

  // CRC-32C of the whole object (chained over the spans, crc32c.h).
  uint32_t Crc32c() const;

  // CRC-32C of each block [starts[i], starts[i + 1]) (the last ends at size()) into `block_crcs`,
  // in one pass over the bytes; returns the whole object's CRC-32C (joined from the blocks'
  // with Crc32cCombine). `starts` must be ascending, start at 0 and lie below size() (a
  // block_sums.h BlockSums); empty: no blocks, the same as Crc32c(). Throws
  // std::invalid_argument naming the bad start.
  uint32_t BlockCrc32c(const std::vector<uint64_t>& starts,
                       std::vector<uint32_t>* block_crcs) const;

 private:
  std::vector<UploadSpan> spans_;
  std::vector<uint64_t> starts_;  // object offset of each span's first byte (ascending)
  uint64_t size_ = 0;
};

}  // namespace gcsio

#endif  // CC_GCSIO_UPLOAD_PAYLOAD_H_
