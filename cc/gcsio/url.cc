#include "cc/gcsio/url.h"

#include <stdexcept>

namespace gcsio {
namespace {

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

}  // namespace

std::string PercentEncode(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if (IsUnreserved(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

std::string NormalizeEndpoint(std::string_view endpoint) {
  std::string e(endpoint);
  while (!e.empty() && e.back() == '/') e.pop_back();
  if (e.empty()) throw std::invalid_argument("endpoint is empty");
  if (e.find("://") == std::string::npos) e = "http://" + e;
  return e;
}

std::string MediaUrl(std::string_view endpoint, std::string_view bucket, std::string_view object,
                     int64_t generation) {
  std::string url = NormalizeEndpoint(endpoint) + "/download/storage/v1/b/" +
                    PercentEncode(bucket) + "/o/" + PercentEncode(object) + "?alt=media";
  if (generation > 0) url += "&generation=" + std::to_string(generation);
  return url;
}

std::string GsUri(std::string_view bucket, std::string_view object) {
  std::string s = "gs://";
  s.append(bucket);
  s.push_back('/');
  s.append(object);
  return s;
}

}  // namespace gcsio
