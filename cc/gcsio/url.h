// URL building for the GCS JSON API: endpoint normalization, percent-encoding, media URLs.
#ifndef CC_GCSIO_URL_H_
#define CC_GCSIO_URL_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace gcsio {

// Percent-encodes every byte except RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~), so
// '/', ' ', '%', '+', '#', '?' and UTF-8 bytes in object names survive as one path segment.
std::string PercentEncode(std::string_view s);

// "127.0.0.1:9023" -> "http://127.0.0.1:9023"; strips trailing '/'. Throws std::invalid_argument
// for an empty endpoint.
std::string NormalizeEndpoint(std::string_view endpoint);

// {endpoint}/download/storage/v1/b/{bucket}/o/{object}?alt=media[&generation=G]
// generation <= 0 means "latest".
std::string MediaUrl(std::string_view endpoint, std::string_view bucket, std::string_view object,
                     int64_t generation);

// "gs://bucket/object" for messages.
std::string GsUri(std::string_view bucket, std::string_view object);

}  // namespace gcsio

#endif  // CC_GCSIO_URL_H_
