// Adapts a Python callable into a TokenSource that may be called from any transfer thread.
#ifndef CC_GCSIO_PY_TOKEN_SOURCE_H_
#define CC_GCSIO_PY_TOKEN_SOURCE_H_

#include <pybind11/pybind11.h>

#include "cc/gcsio/token_cache.h"

namespace gcsio {

// `fn()` must return a str token or a (token: str, expires_at: float epoch seconds) tuple.
// The source takes the GIL for the call and keeps its own reference to `fn`, dropped with the
// GIL held. Errors become std::runtime_error with the exception type and message (tokens are
// never part of it). None gives an empty (disabled) source.
TokenSource MakePyTokenSource(const pybind11::object& fn);

}  // namespace gcsio

#endif  // CC_GCSIO_PY_TOKEN_SOURCE_H_
