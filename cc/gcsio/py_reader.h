// The range reader's Python classes of `_gcsio` (Reader, Batch): gcsckpt.io.reader wraps them
// with the public API (RangeReader, ReadHandle, RangeReadError). Types are converted here; every
// wait runs without the GIL (py_hold.h).
#ifndef CC_GCSIO_PY_READER_H_
#define CC_GCSIO_PY_READER_H_

#include <pybind11/pybind11.h>

namespace gcsio {

// Adds Reader and Batch to module `m`.
void BindReader(pybind11::module_& m);

}  // namespace gcsio

#endif  // CC_GCSIO_PY_READER_H_
