// pybind11 module `_gcsio`: the C++ range reader and uploader as seen from Python. gcsckpt.io
// wraps them with the public API (RangeReader, ReadHandle, RangeReadError; Uploader,
// UploadHandle, UploadError); this layer only converts types and releases the GIL around every
// wait and every checksum.
#include <curl/curl.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cc/gcsio/crc32c.h"
#include "cc/gcsio/defaults.h"
#include "cc/gcsio/engine.h"
#include "cc/gcsio/py_requests.h"
#include "cc/gcsio/py_retry.h"
#include "cc/gcsio/py_token_source.h"
#include "cc/gcsio/uploader.h"
#include "cc/gcsio/url.h"

namespace py = pybind11;

namespace gcsio {
namespace {

// Waits block in short slices so Ctrl-C (a pending signal) can interrupt them.
constexpr double kWaitSlice_s = 0.2;

class PyBatch {
 public:
  PyBatch(std::shared_ptr<Engine> engine, std::shared_ptr<Batch> batch,
          std::vector<std::unique_ptr<HeldBuffer>> views)
      : engine_(std::move(engine)), batch_(std::move(batch)), views_(std::move(views)) {}

  ~PyBatch() {
    {
      py::gil_scoped_release release;
      engine_->Cancel(batch_);  // no-op for a finished batch
      engine_.reset();
    }
    views_.clear();
  }

  // (newly complete indices, failed). Raises TimeoutError after `timeout_s`.
  py::tuple NextCompleted(std::optional<double> timeout_s) {
    const double limit = timeout_s.value_or(-1);
    double waited = 0;
    Batch::Progress p;
    while (true) {
      const double slice = limit < 0 ? kWaitSlice_s : std::min(kWaitSlice_s, limit - waited);
      {
        py::gil_scoped_release release;
        p = batch_->NextCompleted(std::max(slice, 0.0));
      }
      if (!p.timed_out) break;
      waited += slice;
      CheckSignals();
      if (limit >= 0 && waited >= limit) {
        PyErr_SetString(PyExc_TimeoutError, "no request completed within the timeout");
        throw py::error_already_set();
      }
    }
    if (!p.failed && p.completed.empty()) ReleaseViewsIfFinished();
    return py::make_tuple(p.completed, p.failed);
  }

  // Blocks until every fetch has ended; returns whether any request failed.
  bool Wait() {
    while (true) {
      bool finished;
      {
        py::gil_scoped_release release;
        finished = batch_->WaitFinishedFor(kWaitSlice_s);
      }
      if (finished) break;
      CheckSignals();
    }
    ReleaseViewsIfFinished();
    return !batch_->Failures().empty();
  }

  bool Done() const { return batch_->Finished(); }

  void Cancel() {
    {
      py::gil_scoped_release release;
      engine_->Cancel(batch_);
    }
    views_.clear();
  }

  // [{"index", "status" (0: none), "error", "attempts", "cause", "bytes_received",
  //   "offset_reached", "pinned_generation", "seen_generation"}]
  py::list Failures() const {
    py::list out;
    for (const RequestFailure& f : batch_->Failures()) {
      py::dict d;
      d["index"] = f.request;
      d["status"] = f.status;
      d["error"] = f.error;
      d["attempts"] = f.attempts;
      d["cause"] = f.cause;
      d["bytes_received"] = f.bytes_received;
      d["offset_reached"] = f.offset_reached;
      d["pinned_generation"] = f.pinned_generation;
      d["seen_generation"] = f.seen_generation;
      out.append(d);
    }
    return out;
  }

  // [(bucket, object, generation every GET of it was pinned to, 0 if none was named)]
  std::vector<std::tuple<std::string, std::string, int64_t>> Generations() const {
    std::vector<std::tuple<std::string, std::string, int64_t>> out;
    for (const auto& [obj, generation] : batch_->Generations()) {
      out.emplace_back(obj.bucket, obj.object, generation);
    }
    return out;
  }

  size_t size() const { return batch_->num_requests(); }
  size_t num_fetches() const { return batch_->num_fetches(); }

 private:
  // On Ctrl-C: stop the batch so nothing writes into buffers the caller may now reuse.
  void CheckSignals() {
    if (PyErr_CheckSignals() != 0) {
      py::error_already_set err;
      Cancel();
      throw err;
    }
  }

  void ReleaseViewsIfFinished() {
    if (batch_->Finished()) views_.clear();
  }

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<Batch> batch_;
  std::vector<std::unique_ptr<HeldBuffer>> views_;
};

class PyReader {
 public:
  PyReader(const EngineOptions& options, const py::object& token_source)
      : engine_(std::make_shared<Engine>(options, MakePyTokenSource(token_source))) {}

  ~PyReader() {
    py::gil_scoped_release release;
    engine_.reset();
  }

  std::unique_ptr<PyBatch> Submit(const py::object& requests) {
    Engine& engine = Live();
    ParsedRequests parsed = ParseRequests(requests.ptr());
    std::shared_ptr<Batch> batch;
    {
      py::gil_scoped_release release;
      batch = engine.Submit(std::move(parsed.objects), std::move(parsed.ranges),
                            std::move(parsed.dests));
    }
    return std::make_unique<PyBatch>(engine_, std::move(batch), std::move(parsed.views));
  }

  py::dict Stats() {
    const StatsSnapshot s = Live().stats().Snapshot();
    py::dict d;
    d["requests"] = s.requests;
    d["bytes_received"] = s.bytes_received;
    d["bytes_delivered"] = s.bytes_delivered;
    d["retries"] = s.retries;
    d["retries_by_cause"] = s.retries_by_cause;
    d["failures"] = s.failures;
    d["whole_object_answers"] = s.whole_object_answers;
    d["bytes_discarded"] = s.bytes_discarded;
    d["connections_opened"] = s.connections_opened;
    d["connections_reused"] = s.connections_reused;
    d["latency_p50_s"] = s.latency_p50_s;
    d["latency_p90_s"] = s.latency_p90_s;
    d["latency_p99_s"] = s.latency_p99_s;
    d["ttfb_p50_s"] = s.ttfb_p50_s;
    d["ttfb_p90_s"] = s.ttfb_p90_s;
    d["ttfb_p99_s"] = s.ttfb_p99_s;
    return d;
  }

  void ResetStats() { Live().stats().Reset(); }

  // Stops the workers and cancels queued work; later calls raise.
  void Close() {
    std::shared_ptr<Engine> engine = std::move(engine_);
    py::gil_scoped_release release;
    engine.reset();
  }

  bool closed() const { return engine_ == nullptr; }

 private:
  Engine& Live() {
    if (!engine_) throw std::runtime_error("RangeReader is closed");
    return *engine_;
  }

  std::shared_ptr<Engine> engine_;
};

// Read-only, C-contiguous views of Python buffers (each holds its exporter alive), released
// together with the GIL held: one buffer, or every element of a list or tuple of them.
class HeldReadBuffers {
 public:
  explicit HeldReadBuffers(const py::object& obj) {
    if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
      const py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
      // Reserved up front: a Py_buffer is never moved between its export and its release.
      views_.reserve(seq.size());
      for (size_t i = 0; i < seq.size(); ++i) Hold(seq[i], static_cast<int64_t>(i));
    } else {
      views_.reserve(1);
      Hold(obj, -1);
    }
  }
  ~HeldReadBuffers() {
    py::gil_scoped_acquire gil;
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
  void Hold(const py::handle& obj, int64_t index) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      if (index < 0) throw py::error_already_set();
      // Name the element at fault; what is held so far is released by the destructor.
      PyErr_Clear();
      for (Py_buffer& v : views_) PyBuffer_Release(&v);
      views_.clear();
      throw py::type_error("element " + std::to_string(index) + " (" +
                           std::string(py::str(py::type::of(obj).attr("__name__"))) +
                           ") is no C-contiguous buffer");
    }
    views_.push_back(view);
  }

  std::vector<Py_buffer> views_;
};

// One upload: holds the caller's buffers until the upload has finished.
class PyUpload {
 public:
  PyUpload(std::shared_ptr<Uploader> uploader, std::shared_ptr<Upload> upload,
           std::unique_ptr<HeldReadBuffers> view)
      : uploader_(std::move(uploader)), upload_(std::move(upload)), view_(std::move(view)) {}

  ~PyUpload() {
    {
      py::gil_scoped_release release;
      uploader_->Cancel(upload_);  // no-op for a finished upload
      uploader_.reset();
      view_.reset();  // takes the GIL itself
    }
  }

  // Blocks until finished (True) or `timeout_s` passed (False); Ctrl-C cancels and raises.
  bool Wait(std::optional<double> timeout_s) {
    const double limit = timeout_s.value_or(-1);
    double waited = 0;
    while (true) {
      const double slice = limit < 0 ? kWaitSlice_s : std::min(kWaitSlice_s, limit - waited);
      bool finished;
      {
        py::gil_scoped_release release;
        finished = upload_->WaitFor(std::max(slice, 0.0));
      }
      if (finished) break;
      waited += slice;
      if (PyErr_CheckSignals() != 0) {
        py::error_already_set err;
        Cancel();
        throw err;
      }
      if (limit >= 0 && waited >= limit) return false;
    }
    Release();
    return true;
  }

  bool Done() const { return upload_->Finished(); }

  void Cancel() {
    {
      py::gil_scoped_release release;
      uploader_->Cancel(upload_);
      view_.reset();
    }
  }

  // {"ok", "generation", "size", "crc32c", "requests", "attempts", "retries", "status_queries",
  //  "restarts", "resent_bytes", "committed", "status", "cause", "error"}
  py::dict Result() const {
    const UploadResult r = upload_->Result();
    py::dict d;
    d["ok"] = r.ok;
    d["generation"] = r.generation;
    d["size"] = r.size;
    d["crc32c"] = r.crc32c;
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
  void Release() {
    py::gil_scoped_release release;
    view_.reset();
  }

  std::shared_ptr<Uploader> uploader_;
  std::shared_ptr<Upload> upload_;
  std::unique_ptr<HeldReadBuffers> view_;
};

class PyUploader {
 public:
  PyUploader(const UploaderOptions& options, const py::object& token_source)
      : uploader_(std::make_shared<Uploader>(options, MakePyTokenSource(token_source))) {}

  ~PyUploader() {
    py::gil_scoped_release release;
    uploader_.reset();
  }

  std::unique_ptr<PyUpload> Submit(const std::string& bucket, const std::string& object,
                                   const py::object& data, int64_t if_generation_match) {
    if (!uploader_) throw std::runtime_error("Uploader is closed");
    auto view = std::make_unique<HeldReadBuffers>(data);
    UploadSpec spec;
    spec.bucket = bucket;
    spec.object = object;
    spec.payload = UploadPayload(view->spans());
    spec.if_generation_match = if_generation_match;
    std::shared_ptr<Upload> upload;
    {
      py::gil_scoped_release release;  // the checksum and a token refresh run without the GIL
      upload = uploader_->Submit(std::move(spec));
    }
    return std::make_unique<PyUpload>(uploader_, std::move(upload), std::move(view));
  }

  py::dict Stats() const {
    if (!uploader_) throw std::runtime_error("Uploader is closed");
    const UploadStatsSnapshot s = uploader_->Stats();
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

  void Close() {
    std::shared_ptr<Uploader> u = std::move(uploader_);
    py::gil_scoped_release release;
    u.reset();
  }

  bool closed() const { return uploader_ == nullptr; }

 private:
  std::shared_ptr<Uploader> uploader_;
};

}  // namespace
}  // namespace gcsio

PYBIND11_MODULE(_gcsio, m) {
  using gcsio::EngineOptions;
  using gcsio::PyBatch;
  using gcsio::PyReader;
  m.doc() = "C++ GCS range reader (libcurl multi, keep-alive, GIL released while waiting).";
  m.def(
      "curl_version", [] { return std::string(curl_version()); },
      "libcurl's version string, e.g. 'libcurl/7.88.1 OpenSSL/3.0.x ...'.");

  // The one table of defaults (defaults.h); gcsckpt.io.defaults takes its values from here.
  namespace d = gcsio::defaults;
  py::dict defaults;
  defaults["max_inflight_requests"] = d::kMaxInflightRequests;
  defaults["max_inflight_bytes"] = d::kMaxInflightBytes;
  defaults["chunk_bytes"] = d::kChunkBytes;
  defaults["min_chunk_bytes"] = d::kMinChunkBytes;
  defaults["coalesce_gap_bytes"] = d::kCoalesceGapBytes;
  defaults["num_threads"] = d::NumThreads();
  defaults["recv_buffer_bytes"] = d::kRecvBufferBytes;
  defaults["connect_timeout_s"] = d::kConnectTimeoutS;
  defaults["stall_timeout_s"] = d::kStallTimeoutS;
  defaults["max_attempts"] = d::kMaxAttempts;
  defaults["initial_backoff_s"] = d::kInitialBackoffS;
  defaults["max_backoff_s"] = d::kMaxBackoffS;
  defaults["deadline_s"] = d::kRetryDeadlineS;
  defaults["token_refresh_margin_s"] = d::kTokenRefreshMarginS;
  defaults["max_inflight_uploads"] = d::kMaxInflightUploads;
  defaults["upload_inflight_bytes"] = d::kUploadInflightBytes;
  defaults["upload_chunk_bytes"] = d::kUploadChunkBytes;
  defaults["upload_object_bytes"] = d::kUploadObjectBytes;
  defaults["upload_staging_bytes"] = d::kUploadStagingBytes;
  defaults["token_unknown_ttl_s"] = d::kTokenUnknownTtlS;
  m.attr("DEFAULTS") = defaults;
  gcsio::RegisterRetryRules(m);  // retryable statuses, RetryPolicy and chunk validation

  m.def(
      "crc32c",
      [](const py::object& data, uint32_t value) {
        gcsio::HeldReadBuffers view(data);
        py::gil_scoped_release release;
        uint32_t crc = value;
        for (const gcsio::UploadSpan& s : view.spans()) crc = gcsio::Crc32c(s.data, s.size, crc);
        return crc;
      },
      py::arg("data"), py::arg("value") = 0,
      "CRC-32C of a C-contiguous buffer (or of the concatenation of a list/tuple of them), "
      "continuing from `value` (SSE4.2 or table; GIL released).");
  m.def("crc32c_hardware", &gcsio::Crc32cHardware,
        "True when crc32c uses the SSE4.2 crc32 instruction on this CPU.");

  py::class_<gcsio::PyUpload>(m, "Upload")
      .def("wait", &gcsio::PyUpload::Wait, py::arg("timeout_s") = py::none())
      .def("done", &gcsio::PyUpload::Done)
      .def("cancel", &gcsio::PyUpload::Cancel)
      .def("result", &gcsio::PyUpload::Result);

  py::class_<gcsio::PyUploader>(m, "Uploader")
      .def(py::init([](const std::string& endpoint, int max_inflight_requests,
                       uint64_t max_inflight_bytes, uint64_t chunk_bytes, int max_attempts,
                       double initial_backoff_s, double max_backoff_s, double deadline_s,
                       double connect_timeout_s, double stall_timeout_s,
                       const py::object& token_source, const std::string& credential_description) {
             gcsio::UploaderOptions o;
             o.endpoint = gcsio::NormalizeEndpoint(endpoint);
             o.max_inflight_requests = max_inflight_requests;
             o.max_inflight_bytes = max_inflight_bytes;
             o.chunk_bytes = chunk_bytes;
             o.retry.max_attempts = max_attempts;
             o.retry.initial_backoff_s = initial_backoff_s;
             o.retry.max_backoff_s = max_backoff_s;
             o.retry.deadline_s = deadline_s;
             o.connect_timeout_s = connect_timeout_s;
             o.stall_timeout_s = stall_timeout_s;
             o.credential_description = credential_description;
             return std::make_unique<gcsio::PyUploader>(o, token_source);
           }),
           py::arg("endpoint"), py::arg("max_inflight_requests"), py::arg("max_inflight_bytes"),
           py::arg("chunk_bytes"), py::arg("max_attempts"), py::arg("initial_backoff_s"),
           py::arg("max_backoff_s"), py::arg("deadline_s"), py::arg("connect_timeout_s"),
           py::arg("stall_timeout_s"), py::arg("token_source"), py::arg("credential_description"))
      .def("submit", &gcsio::PyUploader::Submit, py::arg("bucket"), py::arg("object"),
           py::arg("data"), py::arg("if_generation_match") = -1)
      .def("stats", &gcsio::PyUploader::Stats)
      .def("close", &gcsio::PyUploader::Close)
      .def_property_readonly("closed", &gcsio::PyUploader::closed);

  py::class_<PyBatch>(m, "Batch")
      .def("next_completed", &PyBatch::NextCompleted, py::arg("timeout_s") = py::none())
      .def("wait", &PyBatch::Wait)
      .def("done", &PyBatch::Done)
      .def("cancel", &PyBatch::Cancel)
      .def("failures", &PyBatch::Failures)
      .def("generations", &PyBatch::Generations)
      .def("num_fetches", &PyBatch::num_fetches)
      .def("__len__", &PyBatch::size);

  py::class_<PyReader>(m, "Reader")
      .def(py::init([](const std::string& endpoint, int max_inflight_requests,
                       uint64_t max_inflight_bytes, uint64_t chunk_bytes,
                       uint64_t coalesce_gap_bytes, uint64_t min_chunk_bytes, int num_threads,
                       int max_attempts, double initial_backoff_s, double max_backoff_s,
                       double deadline_s, double connect_timeout_s, double stall_timeout_s,
                       long recv_buffer_bytes, const py::object& token_source,
                       const std::string& credential_description) {
             EngineOptions o;
             o.endpoint = gcsio::NormalizeEndpoint(endpoint);
             o.max_inflight_requests = max_inflight_requests;
             o.max_inflight_bytes = max_inflight_bytes;
             o.plan.chunk_bytes = chunk_bytes;
             o.plan.coalesce_gap_bytes = coalesce_gap_bytes;
             // Small batches are cut finer so that they fill half the request slots: filling
             // all of them made mid-size reads slower where CPU is short (see io/defaults.py).
             o.plan.target_fetches = static_cast<uint32_t>(std::max(max_inflight_requests / 2, 1));
             o.plan.min_chunk_bytes = min_chunk_bytes;
             o.num_threads = num_threads;
             o.retry.max_attempts = max_attempts;
             o.retry.initial_backoff_s = initial_backoff_s;
             o.retry.max_backoff_s = max_backoff_s;
             o.retry.deadline_s = deadline_s;
             o.connect_timeout_s = connect_timeout_s;
             o.stall_timeout_s = stall_timeout_s;
             o.recv_buffer_bytes = recv_buffer_bytes;
             o.credential_description = credential_description;
             return std::make_unique<PyReader>(o, token_source);
           }),
           py::arg("endpoint"), py::arg("max_inflight_requests"), py::arg("max_inflight_bytes"),
           py::arg("chunk_bytes"), py::arg("coalesce_gap_bytes"), py::arg("min_chunk_bytes"),
           py::arg("num_threads"), py::arg("max_attempts"), py::arg("initial_backoff_s"),
           py::arg("max_backoff_s"), py::arg("deadline_s"), py::arg("connect_timeout_s"),
           py::arg("stall_timeout_s"), py::arg("recv_buffer_bytes"), py::arg("token_source"),
           py::arg("credential_description"))
      .def("submit", &PyReader::Submit, py::arg("requests"))
      .def("stats", &PyReader::Stats)
      .def("reset_stats", &PyReader::ResetStats)
      .def("close", &PyReader::Close)
      .def_property_readonly("closed", &PyReader::closed);
}
