#include "cc/gcsio/py_uploader.h"

#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "cc/gcsio/py_hold.h"
#include "cc/gcsio/py_requests.h"
#include "cc/gcsio/py_token_source.h"
#include "cc/gcsio/uploader.h"
#include "cc/gcsio/url.h"

namespace py = pybind11;

namespace gcsio {
namespace {

// One upload: holds the caller's buffers until the upload has finished.
class PyUpload {
 public:
  PyUpload(std::shared_ptr<Uploader> uploader, std::shared_ptr<Upload> upload,
           std::unique_ptr<HeldReadBuffers> view)
      : held_(std::move(uploader), std::move(upload), std::move(view)) {}

  // Blocks until finished (True) or `timeout_s` passed (False); Ctrl-C cancels and raises.
  bool Wait(std::optional<double> timeout_s) {
    Upload& upload = held_.work();
    if (!held_.Wait(timeout_s.value_or(-1), [&](double s) { return upload.WaitFor(s); })) {
      return false;
    }
    held_.ReleaseIfFinished(true);
    return true;
  }

  bool Done() const { return held_.work().Finished(); }
  void Cancel() { held_.Cancel(); }

  // {"ok", "generation", "size", "crc32c", "requests", "attempts", "retries", "status_queries",
  //  "restarts", "resent_bytes", "committed", "status", "cause", "error"}
  py::dict Result() const {
    const UploadResult r = held_.work().Result();
    py::dict d;
    d["ok"] = r.ok;
    d["generation"] = r.generation;
    d["size"] = r.size;
    d["crc32c"] = r.crc32c;
    d["block_crcs"] = py::bytes(reinterpret_cast<const char*>(r.block_crcs.data()),
                                r.block_crcs.size() * sizeof(uint32_t));
    d["requests"] = r.requests;
    d["attempts"] = r.attempts;
    d["retries"] = r.retries;
    d["status_queries"] = r.status_queries;
    d["restarts"] = r.restarts;
    d["resent_bytes"] = r.resent_bytes;
    d["committed"] = r.committed;
    d["status"] = r.status;
    d["cause"] = r.cause;
    d["error"] = r.error;
    return d;
  }

 private:
  HeldWork<Uploader, Upload, std::unique_ptr<HeldReadBuffers>> held_;
};

class PyUploader {
 public:
  PyUploader(const UploaderOptions& options, const py::object& token_source)
      : uploader_(std::make_shared<Uploader>(options, MakePyTokenSource(token_source)),
                  "Uploader is closed") {}

  std::unique_ptr<PyUpload> Submit(const std::string& bucket, const std::string& object,
                                   const py::object& data, int64_t if_generation_match,
                                   const py::object& block_starts) {
    Uploader& uploader = uploader_.Live();
    auto view = std::make_unique<HeldReadBuffers>(data);
    UploadSpec spec;
    spec.bucket = bucket;
    spec.object = object;
    spec.payload = UploadPayload(view->spans());
    spec.if_generation_match = if_generation_match;
    if (!block_starts.is_none()) {
      const py::buffer_info info = py::buffer(block_starts).request();
      const size_t bytes = static_cast<size_t>(info.size * info.itemsize);
      if (bytes % sizeof(uint64_t) != 0) {
        throw py::value_error("block_starts: " + std::to_string(bytes) +
                              " bytes is no whole number of 8-byte offsets");
      }
      spec.block_starts.resize(bytes / sizeof(uint64_t));
      if (bytes > 0) std::memcpy(spec.block_starts.data(), info.ptr, bytes);
    }
    std::shared_ptr<Upload> upload;
    {
      py::gil_scoped_release release;  // the checksum and a token refresh run without the GIL
      upload = uploader.Submit(std::move(spec));
    }
    return std::make_unique<PyUpload>(uploader_.shared(), std::move(upload), std::move(view));
  }

  py::dict Stats() const {
    const UploadStatsSnapshot s = uploader_.Live().Stats();
    py::dict d;
    d["requests"] = s.requests;
    d["bytes_sent"] = s.bytes_sent;
    d["uploads_done"] = s.uploads_done;
    d["failures"] = s.failures;
    d["retries"] = s.retries;
    d["retries_by_cause"] = s.retries_by_cause;
    d["status_queries"] = s.status_queries;
    d["restarts"] = s.restarts;
    d["connections_opened"] = s.connections_opened;
    return d;
  }

  void Close() { uploader_.Close(); }
  bool closed() const { return uploader_.closed(); }

 private:
  HeldOwner<Uploader> uploader_;
};

}  // namespace

void BindUploader(py::module_& m) {
  py::class_<PyUpload>(m, "Upload")
      .def("wait", &PyUpload::Wait, py::arg("timeout_s") = py::none())
      .def("done", &PyUpload::Done)
      .def("cancel", &PyUpload::Cancel)
      .def("result", &PyUpload::Result);

  py::class_<PyUploader>(m, "Uploader")
      .def(py::init([](const std::string& endpoint, int max_inflight_requests,
                       uint64_t max_inflight_bytes, uint64_t chunk_bytes, int max_attempts,
                       double initial_backoff_s, double max_backoff_s, double deadline_s,
                       double connect_timeout_s, double stall_timeout_s,
                       const py::object& token_source, const std::string& credential_description) {
             UploaderOptions o;
             o.endpoint = NormalizeEndpoint(endpoint);
             o.max_inflight_requests = max_inflight_requests;
             o.max_inflight_bytes = max_inflight_bytes;
             o.chunk_bytes = chunk_bytes;
             o.retry = RetryPolicy{max_attempts, initial_backoff_s, max_backoff_s, deadline_s};
             o.connect_timeout_s = connect_timeout_s;
             o.stall_timeout_s = stall_timeout_s;
             o.credential_description = credential_description;
             return std::make_unique<PyUploader>(o, token_source);
           }),
           py::arg("endpoint"), py::arg("max_inflight_requests"), py::arg("max_inflight_bytes"),
           py::arg("chunk_bytes"), py::arg("max_attempts"), py::arg("initial_backoff_s"),
           py::arg("max_backoff_s"), py::arg("deadline_s"), py::arg("connect_timeout_s"),
           py::arg("stall_timeout_s"), py::arg("token_source"), py::arg("credential_description"))
      .def("submit", &PyUploader::Submit, py::arg("bucket"), py::arg("object"), py::arg("data"),
           py::arg("if_generation_match") = -1, py::arg("block_starts") = py::none())
      .def("stats", &PyUploader::Stats)
      .def("close", &PyUploader::Close)
      .def_property_readonly("closed", &PyUploader::closed);
}

}  // namespace gcsio
