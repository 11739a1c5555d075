// The C++ request rules as `_gcsio` functions, so that Python applies them, not a copy:
// which HTTP statuses are retried, RetryPolicy's validation and the uploader's chunk rule.
#ifndef CC_GCSIO_PY_RETRY_H_
#define CC_GCSIO_PY_RETRY_H_

#include <pybind11/pybind11.h>

namespace gcsio {

// Adds retryable_http_statuses(), validate_retry_policy(...) and
// validate_upload_chunk_bytes(n) to module `m`.
void RegisterRetryRules(pybind11::module_& m);

}  // namespace gcsio

#endif  // CC_GCSIO_PY_RETRY_H_
