#include "cc/gcsio/range_plan.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace gcsio {
namespace {

// Bytes some request needs; touching or overlapping requests are merged.
struct Interval {
  uint64_t begin;
  uint64_t end;
};

// Requests of one object close enough to be fetched together, before splitting.
struct Span {
  uint32_t object_id;
  uint64_t begin;
  uint64_t end;
  std::vector<Interval> needed;
  size_t first_request;  // slice [first_request, last_request) of the sorted request order
  size_t last_request;
};

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

const BlockSums* SumsOf(const std::vector<const BlockSums*>& sums, uint32_t object_id) {
  return object_id < sums.size() ? sums[object_id] : nullptr;
}

std::vector<Span> BuildSpans(const std::vector<RangeSpec>& ranges,
                             const std::vector<uint32_t>& order, uint64_t gap,
                             const std::vector<const BlockSums*>& sums) {
  std::vector<Span> spans;
  for (size_t i = 0; i < order.size(); ++i) {
    const RangeSpec& r = ranges[order[i]];
    uint64_t begin = r.offset;
    uint64_t end = r.offset + r.length;
    if (const BlockSums* b = SumsOf(sums, r.object_id)) {
      // Whole blocks: ascending offsets keep the widened begins ascending.
      begin = b->starts[b->BlockAt(begin)];
      end = b->BlockEnd(b->BlockAt(end - 1));
    }
    bool join = !spans.empty() && spans.back().object_id == r.object_id &&
                (begin <= spans.back().end || begin - spans.back().end <= gap);
    if (!join) {
      spans.push_back(Span{r.object_id, begin, end, {{begin, end}}, i, i + 1});
      continue;
    }
    Span& s = spans.back();
    s.end = std::max(s.end, end);
    s.last_request = i + 1;
    if (begin <= s.needed.back().end) {
      s.needed.back().end = std::max(s.needed.back().end, end);
    } else {
      s.needed.push_back({begin, end});
    }
  }
  return spans;
}

// Cuts a span into fetches of at most ~chunk_bytes that start and end on needed bytes, so no
// fetch is made of gap alone.
// With block checksums (`blocks`), cuts move up to the next block start.
void SplitSpan(const Span& s, uint64_t chunk_bytes, const BlockSums* blocks,
               std::vector<Fetch>* out) {
  const uint64_t len = s.end - s.begin;
  const uint64_t parts = CeilDiv(len, chunk_bytes);
  const uint64_t target = CeilDiv(len, parts);
  size_t k = 0;
  uint64_t cursor = s.begin;
  while (true) {
    uint64_t end = (s.end - cursor <= target) ? s.end : cursor + target;
    if (blocks != nullptr && end < s.end) end = std::min(blocks->StartAtOrAfter(end), s.end);
    while (k + 1 < s.needed.size() && s.needed[k + 1].begin < end) ++k;
    end = std::min(end, s.needed[k].end);
    Fetch f;
    f.object_id = s.object_id;
    f.offset = cursor;
    f.length = end - cursor;
    out->push_back(std::move(f));
    if (end < s.needed[k].end) {
      cursor = end;
    } else if (k + 1 < s.needed.size()) {
      ++k;
      cursor = s.needed[k].begin;
    } else {
      break;
    }
  }
}

// Adds the pieces of every request of span `s` to fetches [first, last) of `fetches`.
void AssignPieces(const std::vector<RangeSpec>& ranges, const std::vector<uint32_t>& order,
                  const Span& s, size_t first, size_t last, std::vector<Fetch>* fetches,
                  std::vector<uint32_t>* pieces_per_request) {
  auto fbegin = fetches->begin() + static_cast<std::ptrdiff_t>(first);
  auto fend = fetches->begin() + static_cast<std::ptrdiff_t>(last);
  for (size_t i = s.first_request; i < s.last_request; ++i) {
    const uint32_t idx = order[i];
    const uint64_t begin = ranges[idx].offset;
    const uint64_t end = begin + ranges[idx].length;
    auto it = std::partition_point(
        fbegin, fend, [begin](const Fetch& f) { return f.offset + f.length <= begin; });
    for (; it != fend && it->offset < end; ++it) {
      const uint64_t lo = std::max(it->offset, begin);
      const uint64_t hi = std::min(it->offset + it->length, end);
      if (lo >= hi) continue;
      it->pieces.push_back(Piece{idx, lo - it->offset, lo - begin, hi - lo});
      ++(*pieces_per_request)[idx];
    }
  }
}

}  // namespace

uint64_t EffectiveChunkBytes(const PlanOptions& options, uint64_t span_bytes) {
  if (options.target_fetches == 0) return options.chunk_bytes;
  const uint64_t floor = std::min(options.min_chunk_bytes, options.chunk_bytes);
  const uint64_t share = CeilDiv(span_bytes, options.target_fetches);
  return std::clamp(share, std::max<uint64_t>(floor, 1), options.chunk_bytes);
}

Plan PlanFetches(const std::vector<RangeSpec>& ranges, const PlanOptions& options,
                 const std::vector<const BlockSums*>& sums) {
  if (options.chunk_bytes == 0) throw std::invalid_argument("chunk_bytes must be >= 1");
  Plan plan;
  plan.pieces_per_request.assign(ranges.size(), 0);
  std::vector<uint32_t> order;
  order.reserve(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const RangeSpec& r = ranges[i];
    if (r.length > UINT64_MAX - r.offset) {
      throw std::invalid_argument("request " + std::to_string(i) + ": offset " +
                                  std::to_string(r.offset) + " + length " +
                                  std::to_string(r.length) + " overflows 64 bits");
    }
    const BlockSums* b = SumsOf(sums, r.object_id);
    if (b != nullptr && r.length > 0 && r.offset + r.length > b->size) {
      throw std::invalid_argument(
          "request " + std::to_string(i) + ": bytes " + std::to_string(r.offset) + "-" +
          std::to_string(r.offset + r.length - 1) +
          " reach past the object's checksummed size of " + std::to_string(b->size) + " bytes");
    }
    if (r.length > 0) order.push_back(static_cast<uint32_t>(i));
  }
  std::sort(order.begin(), order.end(), [&ranges](uint32_t a, uint32_t b) {
    const RangeSpec& x = ranges[a];
    const RangeSpec& y = ranges[b];
    if (x.object_id != y.object_id) return x.object_id < y.object_id;
    if (x.offset != y.offset) return x.offset < y.offset;
    return a < b;
  });

  const std::vector<Span> spans = BuildSpans(ranges, order, options.coalesce_gap_bytes, sums);
  uint64_t span_bytes = 0;
  for (const Span& s : spans) {
    const uint64_t len = s.end - s.begin;
    span_bytes = UINT64_MAX - span_bytes < len ? UINT64_MAX : span_bytes + len;
  }
  const uint64_t chunk = EffectiveChunkBytes(options, span_bytes);
  for (const Span& s : spans) {
    const size_t first = plan.fetches.size();
    SplitSpan(s, chunk, SumsOf(sums, s.object_id), &plan.fetches);
    AssignPieces(ranges, order, s, first, plan.fetches.size(), &plan.fetches,
                 &plan.pieces_per_request);
  }

  // Issue order: fetches serving earlier requests first.
  std::vector<uint32_t> first_request(plan.fetches.size());
  for (size_t i = 0; i < plan.fetches.size(); ++i) {
    auto& pieces = plan.fetches[i].pieces;
    std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return a.fetch_offset < b.fetch_offset;
    });
    uint32_t lowest = UINT32_MAX;
    for (const Piece& p : pieces) lowest = std::min(lowest, p.request);
    first_request[i] = lowest;
  }
  std::vector<size_t> issue(plan.fetches.size());
  std::iota(issue.begin(), issue.end(), 0);
  std::stable_sort(issue.begin(), issue.end(),
                   [&](size_t a, size_t b) { return first_request[a] < first_request[b]; });
  std::vector<Fetch> ordered;
  ordered.reserve(issue.size());
  for (size_t i : issue) ordered.push_back(std::move(plan.fetches[i]));
  plan.fetches = std::move(ordered);
  return plan;
}

}  // namespace gcsio
