// Object metadata GET (JSON API) with the reader's retry policy; used by RangeReader.stat().
#ifndef CC_GCSIO_METADATA_CLIENT_H_
#define CC_GCSIO_METADATA_CLIENT_H_

#include <string>
#include <string_view>

#include "cc/gcsio/engine.h"

namespace gcsio {

struct MetadataResult {
  long status = 0;    // last HTTP status, 0 if no answer arrived
  std::string body;   // answer body (JSON on 200), at most 1 MiB
  std::string error;  // "" on a 200; otherwise why it failed (never contains credentials)
  int attempts = 0;
};

// GET {endpoint}/storage/v1/b/{bucket}/o/{object}, retried like media reads. Blocking; call
// without Python's GIL (it may fetch a token).
MetadataResult FetchObjectMetadata(Engine& engine, std::string_view bucket,
                                   std::string_view object);

}  // namespace gcsio

#endif  // CC_GCSIO_METADATA_CLIENT_H_
