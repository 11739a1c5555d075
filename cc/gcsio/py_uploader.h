// The uploader's Python classes of `_gcsio` (Uploader, Upload): gcsckpt.io.uploader wraps them
// with the public API (Uploader, UploadHandle, UploadError). Types are converted here; every
// wait and every checksum runs without the GIL (py_hold.h).
#ifndef CC_GCSIO_PY_UPLOADER_H_
#define CC_GCSIO_PY_UPLOADER_H_

#include <pybind11/pybind11.h>

namespace gcsio {

// Adds Uploader and Upload to module `m`.
void BindUploader(pybind11::module_& m);

}  // namespace gcsio

#endif  // CC_GCSIO_PY_UPLOADER_H_
