// Stream capture: GPU work issued into a capturing stream only records a graph node, so the gate
// lets it pass; the graph launch is what gets scheduled.
#include "shim.h"

namespace gpuqos::intercept {

bool issued_into_capture(const Operation& op) noexcept {
  if (!is_gpu_work(op.category)) return false;
  // The legacy default stream cannot be captured (and using it while another stream captures is an
  // error the driver reports): no need to ask.
  if (op.stream == nullptr && !op.per_thread) return false;
  const auto helper = op.per_thread ? DriverHelper::stream_is_capturing_ptsz : DriverHelper::stream_is_capturing;
  auto is_capturing = reinterpret_cast<CUresult (*)(CUstream, CUstreamCaptureStatus*)>(driver_helper(helper));
  if (!is_capturing) return false;  // a driver older than CUDA 10: no capture
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  // An error here (an invalidated capture, an implicit capture dependency) means the real call
  // fails the same way: no point holding it back either.
  return is_capturing(op.stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace gpuqos::intercept
