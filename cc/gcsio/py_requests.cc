#include "cc/gcsio/py_requests.h"

#include <pybind11/pybind11.h>

#include <string>
#include <unordered_map>

#include "cc/gcsio/url.h"

namespace py = pybind11;

namespace gcsio {
namespace {

std::string Describe(size_t i, const std::string& bucket, const std::string& object,
                     long long offset, long long length) {
  std::string s = "request " + std::to_string(i) + " (" + GsUri(bucket, object);
  if (length > 0) {
    s += " bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
  } else {
    s += " offset " + std::to_string(offset) + " length " + std::to_string(length);
  }
  return s + ")";
}

std::string Utf8(PyObject* o, size_t i, const char* field) {
  Py_ssize_t n = 0;
  const char* s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &n) : nullptr;
  if (s == nullptr) {
    PyErr_Clear();
    throw py::type_error("request " + std::to_string(i) + ": " + field + " must be a str");
  }
  if (n == 0) throw py::value_error("request " + std::to_string(i) + ": " + field + " is empty");
  return std::string(s, static_cast<size_t>(n));
}

long long NonNegative(PyObject* o, size_t i, const char* field) {
  // PyNumber_Index also admits numpy integers.
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(o));
  if (!index) {
    PyErr_Clear();
    throw py::type_error("request " + std::to_string(i) + ": " + field + " must be an int");
  }
  const long long v = PyLong_AsLongLong(index.ptr());
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error("request " + std::to_string(i) + ": " + field +
                          " does not fit in 63 bits");
  }
  if (v < 0) {
    throw py::value_error("request " + std::to_string(i) + ": " + field + " must be >= 0, got " +
                          std::to_string(v));
  }
  return v;
}

std::string PendingErrorText() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  std::string text = "not a buffer";
  if (value != nullptr) {
    PyObject* s = PyObject_Str(value);
    if (s != nullptr && PyUnicode_Check(s)) text = PyUnicode_AsUTF8(s);
    Py_XDECREF(s);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  return text;
}

}  // namespace

ParsedRequests ParseRequests(PyObject* requests) {
  py::object seq = py::reinterpret_steal<py::object>(
      PySequence_Fast(requests, "requests must be a sequence of RangeRequest"));
  if (!seq) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  if (static_cast<uint64_t>(n) >= UINT32_MAX) throw py::value_error("too many requests");
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());

  ParsedRequests out;
  out.ranges.reserve(static_cast<size_t>(n));
  out.dests.reserve(static_cast<size_t>(n));
  out.views.reserve(static_cast<size_t>(n));
  std::unordered_map<std::string, uint32_t> ids;
  for (Py_ssize_t k = 0; k < n; ++k) {
    const size_t i = static_cast<size_t>(k);
    PyObject* item = items[k];
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 5 || PyTuple_GET_SIZE(item) > 7) {
      throw py::type_error("request " + std::to_string(i) +
                           " must be a RangeRequest(bucket, object, offset, length, dest[, "
                           "generation[, checksums]])");
    }
    std::string bucket = Utf8(PyTuple_GET_ITEM(item, 0), i, "bucket");
    std::string object = Utf8(PyTuple_GET_ITEM(item, 1), i, "object");
    const long long offset = NonNegative(PyTuple_GET_ITEM(item, 2), i, "offset");
    const long long length = NonNegative(PyTuple_GET_ITEM(item, 3), i, "length");

    Py_buffer view;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 4), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) !=
        0) {
      throw py::value_error(Describe(i, bucket, object, offset, length) +
                            ": dest must be a writable C-contiguous buffer (" + PendingErrorText() +
                            ")");
    }
    auto held = std::make_unique<HeldBuffer>(view);
    if (view.len != length) {
      throw py::value_error(Describe(i, bucket, object, offset, length) + ": dest has " +
                            std::to_string(view.len) + " bytes, expected " +
                            std::to_string(length));
    }
    int64_t generation = 0;
    if (PyTuple_GET_SIZE(item) >= 6 && PyTuple_GET_ITEM(item, 5) != Py_None) {
      generation = NonNegative(PyTuple_GET_ITEM(item, 5), i, "generation");
    }
    std::shared_ptr<const BlockSums> sums;
    if (PyTuple_GET_SIZE(item) == 7 && PyTuple_GET_ITEM(item, 6) != Py_None) {
      py::handle h(PyTuple_GET_ITEM(item, 6));
      if (!py::isinstance<BlockSums>(h)) {
        throw py::type_error(Describe(i, bucket, object, offset, length) +
                             ": checksums must be a _gcsio.BlockSums or None");
      }
      sums = h.cast<std::shared_ptr<BlockSums>>();
    }
    std::string key = bucket;
    key.push_back('\0');
    key += object;
    auto [it, inserted] = ids.emplace(std::move(key), static_cast<uint32_t>(out.objects.size()));
    if (inserted) {
      out.objects.push_back(ObjectRef{std::move(bucket), std::move(object), generation, sums});
    } else if (sums != nullptr && out.objects[it->second].sums == nullptr) {
      out.objects[it->second].sums = sums;
    }
    if (!inserted && generation > 0) {
      ObjectRef& known = out.objects[it->second];
      if (known.generation > 0 && known.generation != generation) {
        throw py::value_error(Describe(i, bucket, object, offset, length) + ": generation " +
                              std::to_string(generation) + " differs from generation " +
                              std::to_string(known.generation) +
                              " given for the same object by an earlier request");
      }
      known.generation = generation;
    }
    out.ranges.push_back(
        RangeSpec{it->second, static_cast<uint64_t>(offset), static_cast<uint64_t>(length)});
    out.dests.push_back(held->data());
    out.views.push_back(std::move(held));
  }
  return out;
}

}  // namespace gcsio
