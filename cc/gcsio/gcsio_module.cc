// pybind11 module `_gcsio`: the C++ range reader and uploader as seen from Python. gcsckpt.io
// wraps them with the public API (RangeReader, ReadHandle, RangeReadError; Uploader,
// UploadHandle, UploadError); this layer only converts types and releases the GIL around every
// wait and every checksum. The classes live in py_range_reader.cc and py_uploader.cc; here the
// module, its table of defaults and the checksum functions.
#include <curl/curl.h>
#include <pybind11/pybind11.h>

#include <string>
#include <string_view>

#include "cc/gcsio/crc32c.h"
#include "cc/gcsio/defaults.h"
#include "cc/gcsio/outcome.h"
#include "cc/gcsio/py_range_reader.h"
#include "cc/gcsio/py_requests.h"
#include "cc/gcsio/py_retry.h"
#include "cc/gcsio/py_uploader.h"
#include "cc/gcsio/upload_payload.h"

namespace py = pybind11;

PYBIND11_MODULE(_gcsio, m) {
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
  defaults["checksum_block_bytes"] = d::kChecksumBlockBytes;
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
  m.def(
      "redact_credentials",
      [](std::string_view text, std::string_view secret) {
        return gcsio::RedactCredentials(text, secret);
      },
      py::arg("text"), py::arg("secret") = "",
      "`text` with `secret`, every Bearer token and every ya29. access token replaced by "
      "'<redacted>' (the one redaction rule, RedactCredentials).");
  m.def("crc32c_hardware", &gcsio::Crc32cHardware,
        "True when crc32c uses the SSE4.2 crc32 instruction on this CPU.");

  gcsio::BindUploader(m);
  gcsio::BindRangeReader(m);
}
