// device_stamps.cu — CUDA-event stamps for the timeline and NVTX ranges for nsys / ncu.
//
// A stamp is a cudaEvent recorded on the compute stream. Outside a capture the events come from
// a pool reused every step (reset() between steps, after they were read). While the stream is
// being captured the record becomes a node of the graph (cudaEventRecordExternal), so every
// replay records the event again; such events are never handed out again, so a later eager step
// cannot overwrite a graph's stamps. A stream whose capture a failed call has invalidated gets no
// record (stamp -1: the span is dropped with the failed capture). Times: the step's first stamp
// is placed against an anchor event, the others against that first stamp. The anchor is an event
// recorded on the idle stream and waited for, its host time taken then: first when the clock is
// made (the origin), again whenever the last one is over a second old. cudaEventElapsedTime
// gives float milliseconds (a 24-bit mantissa: 0.25 ms steps an hour from the origin), so
// offsets from a recent anchor keep sub-microsecond precision however long the run.
#include "mnist_ddp/trace/cuda/device_stamps.hpp"

#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <utility>
#include <vector>

#include "mnist_ddp/diagnostics/cuda/cuda_check.hpp"

namespace mnist_ddp {
namespace {

class DeviceStampClock final : public StampClock {
 public:
  explicit DeviceStampClock(cudaStream_t stream) : stream_(stream) {
    CUDA_CHECK(cudaEventCreate(&anchor_));
    CUDA_CHECK(cudaEventCreate(&spare_));
    CUDA_CHECK(cudaEventRecord(anchor_, stream_));
    // Sync (once): the origin's host time is taken when the device has reached it.
    CUDA_CHECK(cudaEventSynchronize(anchor_));
    host_origin_ = std::chrono::steady_clock::now();
    origin_unix_us_ = unix_now_us();
  }
  ~DeviceStampClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaEventDestroy(spare_);
    cudaEventDestroy(anchor_);
  }
  DeviceStampClock(const DeviceStampClock&) = delete;
  DeviceStampClock& operator=(const DeviceStampClock&) = delete;

  int stamp() override { return stamp_on(stream_); }

  int stamp_on(void* where) override {
    cudaStream_t stream = where != nullptr ? static_cast<cudaStream_t>(where) : stream_;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess ||
        status == cudaStreamCaptureStatusInvalidated) {
      (void)cudaGetLastError();  // a capture being abandoned: no stamp, the failure is reported
      return -1;
    }
    const bool capturing = status == cudaStreamCaptureStatusActive;
    int id;
    if (!capturing && next_eager_ < eager_.size()) {
      id = eager_[next_eager_];
    } else {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));  // timing on (the default flags)
      events_.push_back(e);
      id = static_cast<int>(events_.size()) - 1;
      if (!capturing) eager_.push_back(id);
    }
    if (!capturing) ++next_eager_;
    cudaEvent_t e = events_[static_cast<std::size_t>(id)];
    CUDA_CHECK(cudaEventRecordWithFlags(
        e, stream, capturing ? cudaEventRecordExternal : cudaEventRecordDefault));
    return id;
  }

  std::vector<double> times_us(const std::vector<int>& ids) override {
    std::vector<double> out;
    out.reserve(ids.size());
    if (ids.empty()) return out;
    // Sync (traced and sampled steps only): the step's events, on the compute and the NCCL
    // stream, must have been reached to be read (cudaErrorNotReady otherwise). The NCCL stream
    // joins the compute stream before the step ends; each event is waited for all the same.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (const int id : ids)
      CUDA_CHECK(cudaEventSynchronize(events_[static_cast<std::size_t>(id)]));
    if (now_us() - anchor_us_ > kReanchorUs) {
      // Sync: a new anchor on the drained stream, its host time taken once the device reached it.
      CUDA_CHECK(cudaEventRecord(spare_, stream_));
      CUDA_CHECK(cudaEventSynchronize(spare_));
      anchor_us_ = now_us();
      std::swap(anchor_, spare_);
    }
    cudaEvent_t first = events_[static_cast<std::size_t>(ids.front())];
    float base_ms = 0;  // negative when the anchor was just taken, after this step
    CUDA_CHECK(cudaEventElapsedTime(&base_ms, anchor_, first));
    for (const int id : ids) {
      float ms = 0;  // negative when this event came before the step's first stamp
      CUDA_CHECK(cudaEventElapsedTime(&ms, first, events_[static_cast<std::size_t>(id)]));
      out.push_back(anchor_us_ + 1000.0 * static_cast<double>(base_ms) +
                    1000.0 * static_cast<double>(ms));
    }
    return out;
  }

  void reset() override { next_eager_ = 0; }

  double now_us() const override {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                     host_origin_)
        .count();
  }

  double origin_unix_us() const override { return origin_unix_us_; }

  void range_push(const char* name) override { nvtxRangePushA(name); }
  void range_pop() override { nvtxRangePop(); }
  bool has_ranges() const override { return true; }

 private:
  // An anchor older than this (host microseconds) is replaced before a step is read: float
  // milliseconds a second from the anchor are exact to ~0.1 us.
  static constexpr double kReanchorUs = 1e6;

  cudaStream_t stream_;
  cudaEvent_t anchor_ = nullptr;  // recorded at anchor_us_ on this clock (the origin at first)
  cudaEvent_t spare_ = nullptr;   // the next anchor
  double anchor_us_ = 0;
  std::chrono::steady_clock::time_point host_origin_;
  double origin_unix_us_ = 0;
  std::vector<cudaEvent_t> events_;  // every stamp's event, by id
  std::vector<int> eager_;           // ids reused by eager steps
  std::size_t next_eager_ = 0;
};

}  // namespace

std::unique_ptr<StampClock> make_device_stamp_clock(cudaStream_t stream) {
  return std::make_unique<DeviceStampClock>(stream);
}

}  // namespace mnist_ddp
