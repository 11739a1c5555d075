#include "cc/gcsio/py_token_source.h"

#include <memory>
#include <stdexcept>
#include <string>

namespace py = pybind11;

namespace gcsio {
namespace {

bool InterpreterFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

// Owns one reference to a Python object; releases it under the GIL from any thread.
struct PyRef {
  explicit PyRef(PyObject* o) : obj(o) { Py_XINCREF(obj); }
  ~PyRef() {
    if (obj == nullptr || InterpreterFinalizing()) return;  // leak rather than touch a dying VM
    py::gil_scoped_acquire gil;
    Py_DECREF(obj);
  }
  PyObject* obj;
};

Token CallSource(PyObject* fn) {
  if (InterpreterFinalizing()) throw std::runtime_error("the Python interpreter is shutting down");
  py::gil_scoped_acquire gil;
  try {
    py::object result = py::reinterpret_borrow<py::object>(fn)();
    Token token;
    if (py::isinstance<py::str>(result)) {
      token.value = result.cast<std::string>();
    } else if (py::isinstance<py::tuple>(result) && py::len(result) == 2) {
      py::tuple pair = result.cast<py::tuple>();
      token.value = pair[0].cast<std::string>();
      token.expires_at_s = pair[1].is_none() ? 0.0 : pair[1].cast<double>();
    } else {
      throw std::runtime_error("token_provider must return str or (str, expires_at_epoch_s)");
    }
    if (token.value.empty()) throw std::runtime_error("token_provider returned an empty token");
    return token;
  } catch (py::error_already_set& e) {
    std::string what =
        std::string(py::str(e.type().attr("__name__"))) + ": " + std::string(py::str(e.value()));
    if (what.size() > 300) what.resize(300);
    throw std::runtime_error(what);
  } catch (py::cast_error&) {
    throw std::runtime_error("token_provider must return str or (str, expires_at_epoch_s)");
  }
}

}  // namespace

TokenSource MakePyTokenSource(const py::object& fn) {
  if (fn.is_none()) return {};
  auto ref = std::make_shared<PyRef>(fn.ptr());
  return [ref] { return CallSource(ref->obj); };
}

}  // namespace gcsio
