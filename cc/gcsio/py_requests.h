// Python side of a submit: turns a sequence of (bucket, object, offset, length, dest) tuples into
// engine inputs, holding each destination's buffer view until the batch is done.
#ifndef CC_GCSIO_PY_REQUESTS_H_
#define CC_GCSIO_PY_REQUESTS_H_

#include <Python.h>

#include <memory>
#include <vector>

#include "cc/gcsio/batch.h"
#include "cc/gcsio/range_plan.h"

namespace gcsio {

// A writable, C-contiguous buffer view, released (with the GIL held) on destruction.
class HeldBuffer {
 public:
  explicit HeldBuffer(Py_buffer view) : view_(view) {}
  ~HeldBuffer() { PyBuffer_Release(&view_); }
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(view_.buf); }

 private:
  Py_buffer view_;
};

struct ParsedRequests {
  std::vector<ObjectRef> objects;  // distinct (bucket, object) pairs
  std::vector<RangeSpec> ranges;
  std::vector<uint8_t*> dests;
  std::vector<std::unique_ptr<HeldBuffer>> views;
};

// Parses `requests` (GIL held). Throws pybind11 errors (TypeError / ValueError) that name the
// request index and its gs:// range when an item is malformed or its destination is not a
// writable C-contiguous buffer of exactly `length` bytes.
ParsedRequests ParseRequests(PyObject* requests);

}  // namespace gcsio

#endif  // CC_GCSIO_PY_REQUESTS_H_
