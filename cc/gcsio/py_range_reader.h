// The range reader's Python classes of `_gcsio` (RangeReader, Batch): gcsckpt.io.range_reader wraps
// them with the public API (RangeReader, ReadHandle, RangeReadError). Types are converted here;
// every wait runs without the GIL (py_hold.h).
#ifndef CC_GCSIO_PY_RANGE_READER_H_
#define CC_GCSIO_PY_RANGE_READER_H_

#include <pybind11/pybind11.h>

namespace gcsio {

// Adds RangeReader and Batch to module `m`.
void BindRangeReader(pybind11::module_& m);

}  // namespace gcsio

#endif  // CC_GCSIO_PY_RANGE_READER_H_
