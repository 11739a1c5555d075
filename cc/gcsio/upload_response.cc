#include "cc/gcsio/upload_response.h"

#include <cctype>
#include <cstdio>

#include "cc/gcsio/crc32c.h"
#include "cc/gcsio/http_text.h"
#include "cc/gcsio/url.h"

namespace gcsio {
namespace {

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

// A small scanner over one JSON text: enough to walk the members of the top-level object and
// skip nested values (GCS object resources nest `metadata`, `owner`, `acl`).
class JsonScanner {
 public:
  explicit JsonScanner(std::string_view s) : s_(s) {}

  void SkipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  // A JSON string (escapes kept as written except \" and \\, which the fields we read never
  // hold); false if malformed.
  bool String(std::string* out) {
    SkipSpace();
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    ++i_;
    out->clear();
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
      out->push_back(s_[i_++]);
    }
    if (i_ >= s_.size()) return false;
    ++i_;
    return true;
  }
  // Any value; a string's or a scalar's text goes to `text` (nested values give "").
  bool Value(std::string* text) {
    SkipSpace();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') return String(text);
    text->clear();
    if (c == '{' || c == '[') {
      int depth = 0;
      std::string ignored;
      while (i_ < s_.size()) {
        const char d = s_[i_];
        if (d == '"') {
          if (!String(&ignored)) return false;
          continue;
        }
        ++i_;
        if (d == '{' || d == '[') ++depth;
        if ((d == '}' || d == ']') && --depth == 0) return true;
      }
      return false;
    }
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' &&
           !std::isspace(static_cast<unsigned char>(s_[i_]))) {
      ++i_;
    }
    *text = std::string(s_.substr(start, i_ - start));
    return i_ > start;
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

int64_t ParseCommittedRange(std::string_view range_header) {
  std::string_view v = Trim(range_header);
  if (v.empty()) return 0;
  if (v.substr(0, 6) != "bytes=") return -1;
  v.remove_prefix(6);
  const size_t dash = v.find('-');
  if (dash == std::string_view::npos) return -1;
  uint64_t first = 0, last = 0;
  if (!ParseU64(v.substr(0, dash), &first) || !ParseU64(v.substr(dash + 1), &last)) return -1;
  if (first != 0 || last >= static_cast<uint64_t>(INT64_MAX)) return -1;
  return static_cast<int64_t>(last) + 1;
}

ObjectResource ParseObjectResource(std::string_view json) {
  ObjectResource r;
  JsonScanner js(json);
  if (!js.Eat('{')) return r;
  bool have_size = false;
  std::string key, value;
  if (js.Eat('}')) return r;
  while (true) {
    if (!js.String(&key) || !js.Eat(':') || !js.Value(&value)) return ObjectResource();
    if (key == "size") {
      have_size = ParseU64(value, &r.size);
    } else if (key == "generation") {
      uint64_t g = 0;
      if (ParseU64(value, &g)) r.generation = static_cast<int64_t>(g);
    } else if (key == "crc32c") {
      r.has_crc32c = ParseCrc32cBase64(value, &r.crc32c);
    }
    if (js.Eat(',')) continue;
    if (js.Eat('}')) break;
    return ObjectResource();
  }
  r.valid = have_size;
  return r;
}

Outcome UploadStatusOutcome(long status, std::string_view body, std::string_view bucket,
                            std::string_view object, std::string_view credential,
                            bool session_request, int64_t if_generation_match) {
  const std::string where = GsUri(bucket, object);
  if (status == 412) {
    const std::string cond = if_generation_match < 0
                                 ? std::string("a precondition")
                                 : "ifGenerationMatch=" + std::to_string(if_generation_match);
    // The server's text, as StatusOutcome quotes it ("HTTP 400: <snippet>" -> ": <snippet>").
    const std::string quoted = StatusOutcome(400, body, bucket, object, credential).message;
    return MakeOutcome(Verdict::kFail, kPreconditionFailed, status,
                       "HTTP 412 precondition failed: " + cond + " does not hold for " + where +
                           (if_generation_match == 0 ? " (the object exists)" : "") +
                           quoted.substr(8));
  }
  if (session_request && (status == 404 || status == 410)) {
    Outcome o = StatusOutcome(status, body, bucket, object, credential);
    o.verdict = Verdict::kRetry;
    o.cause = kSessionExpired;
    o.message = "HTTP " + std::to_string(status) + ": the upload session of " + where +
                " expired or was lost";
    return o;
  }
  return StatusOutcome(status, body, bucket, object, credential);
}

Outcome CheckUploadedObject(const ObjectResource& r, std::string_view bucket,
                            std::string_view object, uint64_t size, uint32_t crc32c) {
  const std::string where = GsUri(bucket, object);
  if (!r.valid) {
    return MakeOutcome(Verdict::kFail, "bad_object_resource", 0,
                       "the answer that completed the upload of " + where +
                           " is not an object resource with a size");
  }
  const std::string gen = " generation " + std::to_string(r.generation);
  if (r.size != size) {
    return MakeOutcome(Verdict::kFail, "size_mismatch", 0,
                       "uploaded " + where + gen + " has " + std::to_string(r.size) +
                           " bytes, but " + std::to_string(size) + " were sent");
  }
  if (r.generation <= 0) {
    return MakeOutcome(Verdict::kFail, "no_generation", 0,
                       "the server named no generation for uploaded " + where);
  }
  if (!r.has_crc32c) {
    return MakeOutcome(Verdict::kFail, kCrc32cMismatch, 0,
                       "the server reported no crc32c for uploaded " + where + gen);
  }
  if (r.crc32c != crc32c) {
    return MakeOutcome(Verdict::kFail, kCrc32cMismatch, 0,
                       "crc32c mismatch for uploaded " + where + gen + ": the server has " +
                           Crc32cBase64(r.crc32c) + " (" + Hex(r.crc32c) +
                           "), the bytes sent have " + Crc32cBase64(crc32c) + " (" + Hex(crc32c) +
                           ")");
  }
  return MakeOutcome(Verdict::kSuccess, "", 0, "");
}

}  // namespace gcsio
