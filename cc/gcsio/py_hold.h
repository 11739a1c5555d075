// The one hold / release / cancel of what Python holds. HeldWork: work submitted from Python (a
// read Batch, an Upload) keeps its owner (RangeReader, Uploader) and the caller's buffers alive
// until it has finished, waits in slices with the GIL released so that Ctrl-C can interrupt (the
// work is cancelled before the signal is raised), and cancels on destruction, so nothing touches a
// buffer Python let go. HeldOwner: the owner itself, stopped without the GIL on close().
#ifndef CC_GCSIO_PY_HOLD_H_
#define CC_GCSIO_PY_HOLD_H_

#include <pybind11/pybind11.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace gcsio {

// Waits block in slices this long (s) so a pending signal can interrupt them.
inline constexpr double kWaitSlice_s = 0.2;

// `Owner` has Cancel(const std::shared_ptr<Work>&) that returns once nothing of the work runs;
// `Buffers` releases the caller's buffers when destroyed with the GIL held.
template <typename Owner, typename Work, typename Buffers>
class HeldWork {
 public:
  HeldWork(std::shared_ptr<Owner> owner, std::shared_ptr<Work> work, Buffers buffers)
      : owner_(std::move(owner)), work_(std::move(work)), buffers_(std::move(buffers)) {}
  ~HeldWork() {
    {
      pybind11::gil_scoped_release release;
      owner_->Cancel(work_);  // no-op for finished work
      owner_.reset();         // may stop the owner's threads: not with the GIL
    }
    buffers_ = Buffers();
  }
  HeldWork(const HeldWork&) = delete;
  HeldWork& operator=(const HeldWork&) = delete;

  Work& work() const { return *work_; }

  // Calls `done(slice_s)` without the GIL until it returns true (then true) or `timeout_s`
  // seconds passed (then false; < 0 waits without limit). Ctrl-C cancels the work and raises.
  template <typename Done>
  bool Wait(double timeout_s, Done done) {
    double waited = 0;
    while (true) {
      const double slice =
          timeout_s < 0 ? kWaitSlice_s : std::min(kWaitSlice_s, timeout_s - waited);
      bool finished;
      {
        pybind11::gil_scoped_release release;
        finished = done(std::max(slice, 0.0));
      }
      if (finished) return true;
      waited += slice;
      if (PyErr_CheckSignals() != 0) {
        pybind11::error_already_set err;
        Cancel();
        throw err;
      }
      if (timeout_s >= 0 && waited >= timeout_s) return false;
    }
  }

  // Stops the work (GIL released while it winds down), then releases the buffers.
  void Cancel() {
    {
      pybind11::gil_scoped_release release;
      owner_->Cancel(work_);
    }
    buffers_ = Buffers();
  }

  // Releases the buffers once `finished` (nothing writes or reads them any more).
  void ReleaseIfFinished(bool finished) {
    if (finished) buffers_ = Buffers();
  }

 private:
  std::shared_ptr<Owner> owner_;
  std::shared_ptr<Work> work_;
  Buffers buffers_;
};

// The RangeReader or Uploader behind a `_gcsio.RangeReader` / `_gcsio.Uploader`: closed (its
// threads joined) without the GIL by Close() or on destruction; Live() raises
// std::runtime_error(`closed_error`) after.
template <typename Owner>
class HeldOwner {
 public:
  HeldOwner(std::shared_ptr<Owner> owner, std::string closed_error)
      : owner_(std::move(owner)), closed_error_(std::move(closed_error)) {}
  ~HeldOwner() { Close(); }
  HeldOwner(const HeldOwner&) = delete;
  HeldOwner& operator=(const HeldOwner&) = delete;

  Owner& Live() const {
    if (!owner_) throw std::runtime_error(closed_error_);
    return *owner_;
  }
  // The owner, shared with the work submitted to it (which keeps it alive after Close()).
  const std::shared_ptr<Owner>& shared() const { return owner_; }
  void Close() {
    std::shared_ptr<Owner> owner = std::move(owner_);
    pybind11::gil_scoped_release release;
    owner.reset();
  }
  bool closed() const { return owner_ == nullptr; }

 private:
  std::shared_ptr<Owner> owner_;
  const std::string closed_error_;
};

}  // namespace gcsio

#endif  // CC_GCSIO_PY_HOLD_H_
