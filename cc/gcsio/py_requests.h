// Python side of a submit: turns a sequence of (bucket, object, offset, length, dest) tuples into
// range reader inputs, holding each destination's buffer view until the batch is done; and holds
// the read-only buffers an upload (or a checksum) reads.
#ifndef CC_GCSIO_PY_REQUESTS_H_
#define CC_GCSIO_PY_REQUESTS_H_

#include <Python.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "cc/gcsio/batch.h"
#include "cc/gcsio/range_plan.h"
#include "cc/gcsio/upload_payload.h"

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

// Read-only, C-contiguous views of Python buffers (each holds its exporter alive), released
// together with the GIL held: one buffer, or every element of a list or tuple of them.
class HeldReadBuffers {
 public:
  explicit HeldReadBuffers(const pybind11::object& obj) {
    if (pybind11::isinstance<pybind11::list>(obj) || pybind11::isinstance<pybind11::tuple>(obj)) {
      const pybind11::sequence seq = pybind11::reinterpret_borrow<pybind11::sequence>(obj);
      // Reserved up front: a Py_buffer is never moved between its export and its release.
      views_.reserve(seq.size());
      for (size_t i = 0; i < seq.size(); ++i) Hold(seq[i], static_cast<int64_t>(i));
    } else {
      views_.reserve(1);
      Hold(obj, -1);
    }
  }
  ~HeldReadBuffers() {
    pybind11::gil_scoped_acquire gil;
    for (Py_buffer& v : views_) PyBuffer_Release(&v);
  }
  HeldReadBuffers(const HeldReadBuffers&) = delete;
  HeldReadBuffers& operator=(const HeldReadBuffers&) = delete;

  std::vector<UploadSpan> spans() const {
    std::vector<UploadSpan> out;
    out.reserve(views_.size());
    for (const Py_buffer& v : views_) {
      out.push_back(UploadSpan{static_cast<const uint8_t*>(v.buf), static_cast<uint64_t>(v.len)});
    }
    return out;
  }

 private:
  // `index`: the element's place in the list, -1 for a lone buffer.
  void Hold(const pybind11::handle& obj, int64_t index) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      if (index < 0) throw pybind11::error_already_set();
      // Name the element at fault; what is held so far is released by the destructor.
      PyErr_Clear();
      for (Py_buffer& v : views_) PyBuffer_Release(&v);
      views_.clear();
      throw pybind11::type_error(
          "element " + std::to_string(index) + " (" +
          std::string(pybind11::str(pybind11::type::of(obj).attr("__name__"))) +
          ") is no C-contiguous buffer");
    }
    views_.push_back(view);
  }

  std::vector<Py_buffer> views_;
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
