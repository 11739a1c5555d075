#include "cc/gcsio/range_response.h"

#include <cstdio>
#include <string>

#include "cc/gcsio/http_text.h"

namespace gcsio {
namespace {

std::string RangeText(const AttemptRange& r) {
  return "bytes=" + std::to_string(r.first) + "-" + std::to_string(r.first + r.length - 1);
}

}  // namespace

std::string ChecksumMessage(uint64_t offset, uint64_t length, uint32_t expected,
                            uint32_t computed) {
  char crcs[64];
  std::snprintf(crcs, sizeof(crcs), "expected 0x%08x, computed 0x%08x", expected, computed);
  return "CRC-32C mismatch in bytes " + std::to_string(offset) + "-" +
         std::to_string(offset + length - 1) + " (block of " + Grouped(length) + " bytes): " + crcs;
}

ContentRange ParseContentRange(std::string_view value) {
  ContentRange cr;
  value = Trim(value);
  if (value.substr(0, 6) != "bytes ") return cr;
  value.remove_prefix(6);
  const size_t slash = value.find('/');
  if (slash == std::string_view::npos) return cr;
  std::string_view span = Trim(value.substr(0, slash));
  std::string_view total = Trim(value.substr(slash + 1));
  if (total != "*") {
    if (!ParseU64(total, &cr.total)) return cr;
    cr.has_total = true;
  }
  if (span == "*") {
    cr.unsatisfied = true;
    cr.valid = cr.has_total;
    return cr;
  }
  const size_t dash = span.find('-');
  if (dash == std::string_view::npos) return cr;
  if (!ParseU64(span.substr(0, dash), &cr.first) || !ParseU64(span.substr(dash + 1), &cr.last)) {
    return cr;
  }
  cr.valid = cr.first <= cr.last && (!cr.has_total || cr.last < cr.total);
  return cr;
}

Outcome CheckSuccessHeaders(long status, const AttemptRange& range, std::string_view content_range,
                            int64_t content_length) {
  const std::string want = RangeText(range);
  if (status == 200) {
    if (range.first != 0) {
      return MakeOutcome(
          Verdict::kFail, "range_ignored", status,
          "HTTP 200 (whole object) for " + want + ": the server ignored the Range header");
    }
    if (content_length >= 0 && static_cast<uint64_t>(content_length) != range.length) {
      return MakeOutcome(Verdict::kFail, "range_ignored", status,
                         "HTTP 200 with Content-Length " + std::to_string(content_length) +
                             " for " + want + ": the server ignored the Range header");
    }
    return MakeOutcome(Verdict::kSuccess, "", status, "");
  }
  if (status != 206) {
    return MakeOutcome(Verdict::kFail, "unexpected_status", status,
                       "unexpected HTTP " + std::to_string(status) + " for " + want);
  }
  const ContentRange cr = ParseContentRange(content_range);
  const uint64_t want_last = range.first + range.length - 1;
  if (cr.valid && !cr.unsatisfied && cr.first == range.first && cr.last < want_last &&
      cr.has_total && cr.last + 1 == cr.total) {
    return MakeOutcome(
        Verdict::kFail, "beyond_end", status,
        want + " reaches past the end of the object (size " + std::to_string(cr.total) + " bytes)");
  }
  if (!cr.valid || cr.unsatisfied || cr.first != range.first || cr.last != want_last) {
    return MakeOutcome(Verdict::kRetry, "bad_content_range", status,
                       "HTTP 206 with Content-Range '" + std::string(Trim(content_range)) +
                           "' does not match requested " + want);
  }
  if (content_length >= 0 && static_cast<uint64_t>(content_length) != range.length) {
    return MakeOutcome(Verdict::kRetry, "bad_content_range", status,
                       "HTTP 206 with Content-Length " + std::to_string(content_length) +
                           " does not match requested " + want);
  }
  return MakeOutcome(Verdict::kSuccess, "", status, "");
}

Outcome CheckWholeObjectAnswer(const AttemptRange& range, int64_t content_length) {
  if (content_length >= 0 && static_cast<uint64_t>(content_length) < range.first + range.length) {
    return MakeOutcome(Verdict::kFail, "range_not_honoured", 200,
                       "range not honoured: HTTP 200 answered the whole object (" +
                           std::to_string(content_length) + " bytes) for " + RangeText(range) +
                           ", which reaches past its end");
  }
  return MakeOutcome(Verdict::kSuccess, "", 200, "");
}

Outcome CheckGeneration(int64_t pinned, int64_t seen) {
  if (pinned <= 0 || seen <= 0 || pinned == seen) return MakeOutcome(Verdict::kSuccess, "", 0, "");
  Outcome o = MakeOutcome(Verdict::kFail, kGenerationChanged, 0,
                          "object changed during read: the server answered with generation " +
                              std::to_string(seen) + ", but this read is pinned to generation " +
                              std::to_string(pinned));
  o.pinned_generation = pinned;
  o.seen_generation = seen;
  return o;
}

}  // namespace gcsio
