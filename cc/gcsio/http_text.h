// Small text helpers for HTTP header values, shared by the range reader's and the uploader's
// header and response parsing: whitespace trimming, strict unsigned parsing and the
// case-insensitive "name: value" match of one header line; and byte counts as messages write them.
#ifndef CC_GCSIO_HTTP_TEXT_H_
#define CC_GCSIO_HTTP_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace gcsio {

// `s` without leading and trailing whitespace (std::isspace).
std::string_view Trim(std::string_view s);

// Parses all of `s` as a decimal uint64_t into *out; false when `s` is empty, holds anything
// but digits, or overflows (*out is then unspecified).
bool ParseU64(std::string_view s, uint64_t* out);

// When header line `line` is "<name>:<value>" with the name matched case-insensitively
// (`name` must be lower case), sets *value to the trimmed value (a view into `line`) and
// returns true; else false and *value is untouched.
bool HeaderValue(std::string_view line, std::string_view name, std::string_view* value);

// `n` in decimal with thousands separators, for messages: 16095232 -> "16,095,232".
std::string Grouped(uint64_t n);

}  // namespace gcsio

#endif  // CC_GCSIO_HTTP_TEXT_H_
