#include "cc/gcsio/py_retry.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

#include "cc/gcsio/retry_policy.h"
#include "cc/gcsio/uploader.h"

namespace gcsio {

namespace py = pybind11;

void RegisterRetryRules(py::module_& m) {
  m.def(
      "retryable_http_statuses",
      [] {
        std::vector<int> statuses;  // every status IsRetryableStatus accepts, ascending
        for (int status = 100; status < 600; ++status) {
          if (IsRetryableStatus(status)) statuses.push_back(status);
        }
        return statuses;
      },
      "The HTTP statuses every request retries (IsRetryableStatus), ascending.");
  m.def(
      "validate_retry_policy",
      [](int max_attempts, double initial_backoff_s, double max_backoff_s, double deadline_s) {
        RetryPolicy policy;
        policy.max_attempts = max_attempts;
        policy.initial_backoff_s = initial_backoff_s;
        policy.max_backoff_s = max_backoff_s;
        policy.deadline_s = deadline_s;
        policy.Validate();
      },
      py::arg("max_attempts"), py::arg("initial_backoff_s"), py::arg("max_backoff_s"),
      py::arg("deadline_s"),
      "RetryPolicy::Validate: ValueError naming the field out of range (seconds, attempts).");
  m.def(
      "validate_upload_chunk_bytes",
      [](int64_t chunk_bytes) {
        UploaderOptions options;  // the defaults, which are valid, but for chunk_bytes
        options.chunk_bytes = chunk_bytes < 0 ? 0 : static_cast<uint64_t>(chunk_bytes);
        options.Validate();
      },
      py::arg("chunk_bytes"),
      "UploaderOptions' chunk rule: ValueError unless chunk_bytes is a positive multiple of "
      "256 KiB.");
}

}  // namespace gcsio
