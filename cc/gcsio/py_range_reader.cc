#include "cc/gcsio/py_range_reader.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cc/gcsio/py_hold.h"
#include "cc/gcsio/py_requests.h"
#include "cc/gcsio/py_token_source.h"
#include "cc/gcsio/range_reader.h"
#include "cc/gcsio/url.h"

namespace py = pybind11;

namespace gcsio {
namespace {

using HeldViews = std::vector<std::unique_ptr<HeldBuffer>>;

class PyBatch {
 public:
  PyBatch(std::shared_ptr<RangeReader> reader, std::shared_ptr<Batch> batch, HeldViews views)
      : held_(std::move(reader), std::move(batch), std::move(views)) {}

  // (newly complete indices, failed). Raises TimeoutError after `timeout_s`.
  py::tuple NextCompleted(std::optional<double> timeout_s) {
    Batch::Progress p;
    const bool done = held_.Wait(timeout_s.value_or(-1), [&](double slice_s) {
      p = batch().NextCompleted(slice_s);
      return !p.timed_out;
    });
    if (!done) {
      PyErr_SetString(PyExc_TimeoutError, "no request completed within the timeout");
      throw py::error_already_set();
    }
    if (!p.failed && p.completed.empty()) held_.ReleaseIfFinished(batch().Finished());
    return py::make_tuple(p.completed, p.failed);
  }

  // Blocks until every fetch has ended; returns whether any request failed.
  bool Wait() {
    held_.Wait(-1, [this](double slice_s) { return batch().WaitFinishedFor(slice_s); });
    held_.ReleaseIfFinished(batch().Finished());
    return !batch().Failures().empty();
  }

  bool Done() const { return batch().Finished(); }
  void Cancel() { held_.Cancel(); }

  // [{"index", "status" (0: none), "error", "attempts", "cause", "bytes_received",
  //   "offset_reached", "pinned_generation", "seen_generation"}]
  py::list Failures() const {
    py::list out;
    for (const RequestFailure& f : batch().Failures()) {
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
      if (f.cause == kChecksumMismatch && f.checksum.length > 0) {
        d["block_offset"] = f.checksum.offset;
        d["block_length"] = f.checksum.length;
        d["expected_crc32c"] = f.checksum.expected;
        d["computed_crc32c"] = f.checksum.computed;
      }
      out.append(d);
    }
    return out;
  }

  // [(bucket, object, generation every GET of it was pinned to, 0 if none was named)]
  std::vector<std::tuple<std::string, std::string, int64_t>> Generations() const {
    std::vector<std::tuple<std::string, std::string, int64_t>> out;
    for (const auto& [obj, generation] : batch().Generations()) {
      out.emplace_back(obj.bucket, obj.object, generation);
    }
    return out;
  }

  size_t size() const { return batch().num_requests(); }
  size_t num_fetches() const { return batch().num_fetches(); }

 private:
  Batch& batch() const { return held_.work(); }

  HeldWork<RangeReader, Batch, HeldViews> held_;
};

class PyRangeReader {
 public:
  PyRangeReader(const RangeReaderOptions& options, const py::object& token_source)
      : reader_(std::make_shared<RangeReader>(options, MakePyTokenSource(token_source)),
                "RangeReader is closed") {}

  std::unique_ptr<PyBatch> Submit(const py::object& requests) {
    RangeReader& reader = reader_.Live();
    ParsedRequests parsed = ParseRequests(requests.ptr());
    std::shared_ptr<Batch> batch;
    {
      py::gil_scoped_release release;
      batch = reader.Submit(std::move(parsed.objects), std::move(parsed.ranges),
                            std::move(parsed.dests));
    }
    return std::make_unique<PyBatch>(reader_.shared(), std::move(batch), std::move(parsed.views));
  }

  py::dict Stats() {
    const StatsSnapshot s = reader_.Live().stats().Snapshot();
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

  void ResetStats() { reader_.Live().stats().Reset(); }

  // Stops the loops and cancels queued work; later calls raise.
  void Close() { reader_.Close(); }
  bool closed() const { return reader_.closed(); }

 private:
  HeldOwner<RangeReader> reader_;
};

}  // namespace

// Little-endian uint64 / uint32 arrays from a bytes-like object; ValueError names `what`.
template <typename T>
std::vector<T> Array(const py::buffer& data, const char* what) {
  const py::buffer_info info = data.request();
  const size_t bytes = static_cast<size_t>(info.size * info.itemsize);
  if (bytes % sizeof(T) != 0) {
    throw py::value_error(std::string(what) + ": " + std::to_string(bytes) +
                          " bytes is no whole number of " + std::to_string(sizeof(T)) +
                          "-byte values");
  }
  std::vector<T> out(bytes / sizeof(T));
  if (bytes > 0) std::memcpy(out.data(), info.ptr, bytes);
  return out;
}

void BindRangeReader(py::module_& m) {
  py::class_<BlockSums, std::shared_ptr<BlockSums>>(m, "BlockSums")
      .def(py::init([](uint64_t size, const py::buffer& starts, const py::buffer& crcs) {
             auto sums = std::make_shared<BlockSums>();
             sums->size = size;
             sums->starts = Array<uint64_t>(starts, "starts");
             sums->crcs = Array<uint32_t>(crcs, "crcs");
             const std::string problem = sums->Problem();
             if (!problem.empty()) throw py::value_error("block checksums: " + problem);
             return sums;
           }),
           py::arg("size"), py::arg("starts"), py::arg("crcs"))
      .def_property_readonly("size", [](const BlockSums& b) { return b.size; })
      .def("__len__", &BlockSums::count);

  py::class_<PyBatch>(m, "Batch")
      .def("next_completed", &PyBatch::NextCompleted, py::arg("timeout_s") = py::none())
      .def("wait", &PyBatch::Wait)
      .def("done", &PyBatch::Done)
      .def("cancel", &PyBatch::Cancel)
      .def("failures", &PyBatch::Failures)
      .def("generations", &PyBatch::Generations)
      .def("num_fetches", &PyBatch::num_fetches)
      .def("__len__", &PyBatch::size);

  py::class_<PyRangeReader>(m, "RangeReader")
      .def(py::init([](const std::string& endpoint, int max_inflight_requests,
                       uint64_t max_inflight_bytes, uint64_t chunk_bytes,
                       uint64_t coalesce_gap_bytes, uint64_t min_chunk_bytes, int num_threads,
                       int max_attempts, double initial_backoff_s, double max_backoff_s,
                       double deadline_s, double connect_timeout_s, double stall_timeout_s,
                       long recv_buffer_bytes, const py::object& token_source,
                       const std::string& credential_description) {
             RangeReaderOptions o;
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
             o.retry = RetryPolicy{max_attempts, initial_backoff_s, max_backoff_s, deadline_s};
             o.connect_timeout_s = connect_timeout_s;
             o.stall_timeout_s = stall_timeout_s;
             o.recv_buffer_bytes = recv_buffer_bytes;
             o.credential_description = credential_description;
             return std::make_unique<PyRangeReader>(o, token_source);
           }),
           py::arg("endpoint"), py::arg("max_inflight_requests"), py::arg("max_inflight_bytes"),
           py::arg("chunk_bytes"), py::arg("coalesce_gap_bytes"), py::arg("min_chunk_bytes"),
           py::arg("num_threads"), py::arg("max_attempts"), py::arg("initial_backoff_s"),
           py::arg("max_backoff_s"), py::arg("deadline_s"), py::arg("connect_timeout_s"),
           py::arg("stall_timeout_s"), py::arg("recv_buffer_bytes"), py::arg("token_source"),
           py::arg("credential_description"))
      .def("submit", &PyRangeReader::Submit, py::arg("requests"))
      .def("stats", &PyRangeReader::Stats)
      .def("reset_stats", &PyRangeReader::ResetStats)
      .def("close", &PyRangeReader::Close)
      .def_property_readonly("closed", &PyRangeReader::closed);
}

}  // namespace gcsio
