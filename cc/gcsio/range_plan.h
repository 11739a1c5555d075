// Range planning: turns caller byte ranges into the HTTP fetches that serve them.
//
// Ranges of one object whose gap is <= coalesce_gap_bytes share one fetch; a fetch longer than
// chunk_bytes is split into near-equal parts so they can run in parallel. Each fetch carries the
// pieces that scatter its body into the callers' destinations. For an object with block
// checksums (block_sums.h) every range is first widened to whole blocks and fetches are cut only
// at block starts, so each fetch body is a run of whole blocks its ScatterWriter can check.
#ifndef CC_GCSIO_RANGE_PLAN_H_
#define CC_GCSIO_RANGE_PLAN_H_

#include <cstdint>
#include <vector>

#include "cc/gcsio/block_sums.h"
#include "cc/gcsio/defaults.h"

namespace gcsio {

// One caller request: `length` bytes at `offset` of object `object_id` (an index into the
// batch's object table).
struct RangeSpec {
  uint32_t object_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// A slice of a fetch body that belongs to one request's destination.
struct Piece {
  uint32_t request = 0;       // index into the RangeSpec list
  uint64_t fetch_offset = 0;  // where the slice starts within the fetch body
  uint64_t dest_offset = 0;   // where it goes within the request's destination
  uint64_t length = 0;
};

// One ranged GET: bytes [offset, offset + length) of one object.
struct Fetch {
  uint32_t object_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<Piece> pieces;  // sorted by fetch_offset
};

struct PlanOptions {
  uint64_t chunk_bytes = defaults::kChunkBytes;               // longest fetch (bytes); must be >= 1
  uint64_t coalesce_gap_bytes = defaults::kCoalesceGapBytes;  // largest hole (bytes) joined
  // When > 0 and the batch is small, fetches are cut shorter than chunk_bytes (but not below
  // min_chunk_bytes) so that about target_fetches of them can run at once: a 64 MiB read with
  // 64 requests allowed in flight becomes 32 x 2 MiB rather than 8 x 8 MiB.
  uint32_t target_fetches = 0;
  uint64_t min_chunk_bytes = defaults::kMinChunkBytes;
};

// The fetch length PlanFetches cuts to for `span_bytes` bytes to fetch in total (after
// coalescing): clamp(ceil(span_bytes / target_fetches), min(min_chunk_bytes, chunk_bytes),
// chunk_bytes), or chunk_bytes when target_fetches is 0.
uint64_t EffectiveChunkBytes(const PlanOptions& options, uint64_t span_bytes);

struct Plan {
  // Fetches in issue order: by the lowest request index they serve, then by offset, so callers
  // that consume requests in order see early ones complete first.
  std::vector<Fetch> fetches;
  // How many pieces each request is split into; 0 for zero-length requests (complete at once).
  std::vector<uint32_t> pieces_per_request;
};

// Plans fetches for `ranges` (any order; overlaps and zero lengths allowed). `sums[object_id]`,
// when present and not null, are that object's block checksums: its ranges are widened to whole
// blocks. Throws std::invalid_argument if chunk_bytes is 0, a range's end overflows 64 bits, or
// a range of a checksummed object reaches past its checksummed size.
Plan PlanFetches(const std::vector<RangeSpec>& ranges, const PlanOptions& options,
                 const std::vector<const BlockSums*>& sums = {});

}  // namespace gcsio

#endif  // CC_GCSIO_RANGE_PLAN_H_
