#include "cc/gcsio/defaults.h"

#include <algorithm>
#include <thread>

namespace gcsio {
namespace defaults {

int NumThreads() {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());  // 0 if unknown
  return std::clamp(cpus, 1, kMaxNumThreads);
}

}  // namespace defaults
}  // namespace gcsio
