// FakeGcsServer's HTTP text (test-only): parsing a request's head into a FakeGcsServer::Request,
// plain status answers, and sending bytes on a socket.
#ifndef CC_GCSIO_FAKE_GCS_REQUEST_H_
#define CC_GCSIO_FAKE_GCS_REQUEST_H_

#include <cstddef>
#include <string>

#include "cc/gcsio/fake_gcs_server.h"

namespace gcsio::fake_gcs {

// Writes all `n` bytes of `data` to socket `fd`; false when the peer is gone.
bool SendAll(int fd, const char* data, size_t n);
bool SendAll(int fd, const std::string& s);

// Parses "GET|POST|PUT {target} HTTP/1.1" and its headers: media GETs with a Range, resumable
// upload starts, chunks and status queries; false for anything else.
bool ParseRequest(const std::string& head, FakeGcsServer::Request* r);

// The head of a text/plain answer with `status` and a body of `content_length` bytes.
std::string StatusHead(int status, size_t content_length);

}  // namespace gcsio::fake_gcs

#endif  // CC_GCSIO_FAKE_GCS_REQUEST_H_
