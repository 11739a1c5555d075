// Judging the answers of a resumable upload (JSON API): the committed offset a 308 names, the
// object resource of the final 200/201 (size, generation, crc32c), and the verdicts of
// upload-specific statuses (412: precondition; 404/410 on a session: it expired).
#ifndef CC_GCSIO_UPLOAD_RESPONSE_H_
#define CC_GCSIO_UPLOAD_RESPONSE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "cc/gcsio/outcome.h"

namespace gcsio {

// Causes an upload fails or restarts with.
inline constexpr const char* kPreconditionFailed = "precondition_failed";
inline constexpr const char* kSessionExpired = "session_expired";
inline constexpr const char* kCrc32cMismatch = "crc32c_mismatch";

// Bytes a session holds from its 308 answer's `Range` header ("bytes=0-K" -> K + 1; absent or
// empty -> 0: nothing committed). -1 for any other form.
int64_t ParseCommittedRange(std::string_view range_header);

// The fields of a GCS object resource (JSON) an upload checks. Only top-level members are read;
// values may be JSON strings (as GCS sends int64 fields) or bare numbers.
struct ObjectResource {
  bool valid = false;  // a JSON object with at least `size`
  uint64_t size = 0;
  int64_t generation = 0;
  bool has_crc32c = false;
  uint32_t crc32c = 0;
};
ObjectResource ParseObjectResource(std::string_view json);

// Verdict for a non-2xx, non-308 answer to an upload request. `session_request`: a PUT to the
// session URL (then 404 / 410 mean the session expired: kRetry with cause kSessionExpired, and
// the upload restarts). 412: kFail with cause kPreconditionFailed naming `if_generation_match`.
// Everything else as StatusOutcome (retryable statuses, 401/403, 404 of the bucket).
Outcome UploadStatusOutcome(long status, std::string_view body, std::string_view bucket,
                            std::string_view object, std::string_view credential,
                            bool session_request, int64_t if_generation_match);

// Checks the object resource of a finished upload against what was sent: size, a generation,
// and the server's crc32c equal to `crc32c` (computed here). kFail names gs://bucket/object and
// the generation.
Outcome CheckUploadedObject(const ObjectResource& resource, std::string_view bucket,
                            std::string_view object, uint64_t size, uint32_t crc32c);

}  // namespace gcsio

#endif  // CC_GCSIO_UPLOAD_RESPONSE_H_
