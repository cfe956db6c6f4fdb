// The driver-API side of the replayer: setup, paced submission, event timing, teardown.
#include "cuda_replayer.h"

#include <cmath>

#include <sys/prctl.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "cuda_check.h"

namespace gpuqos::replay {

namespace {

constexpr std::uint32_t kDefaultSharedLimitBytes = 48 * 1024;  // more needs an opt-in per function

// Sleeps most of the way, then spins the last few microseconds. Sleeping (with the timer slack
// cut to 1 us, see the constructor) rather than spinning leaves the CPU to the device server on a
// small machine; the spin absorbs the wake-up latency.
void pace_until(CudaReplayer::Clock::time_point target) {
  using namespace std::chrono_literals;
  constexpr auto kSpin = 20us;
  if (target - CudaReplayer::Clock::now() > kSpin) std::this_thread::sleep_until(target - kSpin);
  while (CudaReplayer::Clock::now() < target) {
  }
}

bool uses_pinned_host(const Operation& op) {
  return (op.direction == CopyDirection::h2d || op.direction == CopyDirection::d2h) &&
         op.host_memory != HostMemory::pageable;
}

}  // namespace

CudaReplayer::CudaReplayer(const Workload& workload, const std::string& ptx, int device, bool keep_gaps,
                           std::chrono::nanoseconds lead, double pace_scale, bool thread_per_stream)
    : workload_(workload), keep_gaps_(keep_gaps), lead_(lead), pace_scale_(pace_scale) {
  ::prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us instead of 50 us: paced sleeps wake on time
  GQ_CU_CHECK(cuInit(0));
  GQ_CU_CHECK(cuDeviceGet(&device_, device));
  GQ_CU_CHECK(cuDevicePrimaryCtxRetain(&context_, device_));
  GQ_CU_CHECK(cuCtxSetCurrent(context_));
  GQ_CU_CHECK(cuModuleLoadData(&module_, ptx.c_str()));
  std::vector<std::uint32_t> max_shared(workload.kernels.size(), 0);
  for (const Operation& op : workload.ops) {
    if (op.kind == OpKind::kernel) {
      auto& m = max_shared.at(static_cast<std::size_t>(op.kernel));
      m = std::max(m, op.shared_bytes);
    }
    if (op.kind != OpKind::kernel && op.bytes == 0) ++skipped_ops_;
    if (!streams_.count(op.stream)) {
      CUstream stream = nullptr;
      GQ_CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
      streams_[op.stream] = stream;
      CUevent end = nullptr;
      GQ_CU_CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
      end_events_[op.stream] = end;
    }
  }
  for (std::size_t k = 0; k < workload.kernels.size(); ++k) {
    CUfunction function = nullptr;
    GQ_CU_CHECK(cuModuleGetFunction(&function, module_, workload.kernels[k].entry.c_str()));
    if (max_shared[k] > kDefaultSharedLimitBytes) {
      GQ_CU_CHECK(cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(max_shared[k])));
    }
    functions_.push_back(function);
  }
  GQ_CU_CHECK(cuEventCreate(&start_event_, CU_EVENT_DEFAULT));
  allocate_buffers();
  // One group of every op, or one per stream.
  std::map<std::int64_t, std::size_t> slot;
  for (std::size_t i = 0; i < workload.ops.size(); ++i) {
    auto [it, added] = slot.try_emplace(thread_per_stream ? workload.ops[i].stream : 0, op_groups_.size());
    if (added) op_groups_.emplace_back();
    op_groups_[it->second].push_back(i);
  }
}

void CudaReplayer::allocate_buffers() {
  std::uint64_t device_a = 0, device_b = 0, pinned = 0, pageable = 0;
  for (const Operation& op : workload_.ops) {
    if (op.kind == OpKind::kernel) continue;
    device_a = std::max(device_a, op.bytes);
    if (op.kind == OpKind::memcpy && (op.direction == CopyDirection::d2d || op.direction == CopyDirection::other))
      device_b = std::max(device_b, op.bytes);
    if (op.kind == OpKind::memcpy && uses_pinned_host(op)) pinned = std::max(pinned, op.bytes);
    if (op.kind == OpKind::memcpy && op.host_memory == HostMemory::pageable) pageable = std::max(pageable, op.bytes);
  }
  if (device_a > 0) GQ_CU_CHECK(cuMemAlloc(&device_a_, device_a));
  if (device_b > 0) GQ_CU_CHECK(cuMemAlloc(&device_b_, device_b));
  if (pinned > 0) {
    GQ_CU_CHECK(cuMemAllocHost(&pinned_host_, pinned));
    std::memset(pinned_host_, 0, pinned);
  }
  pageable_host_.assign(pageable, 0);  // touched now, so no page faults while replaying
}

CudaReplayer::~CudaReplayer() {
  // Best effort: a destructor cannot report, and the process is usually about to exit.
  for (auto& [id, stream] : streams_) cuStreamSynchronize(stream);
  for (auto& [id, event] : end_events_) cuEventDestroy(event);
  if (start_event_) cuEventDestroy(start_event_);
  for (auto& [id, stream] : streams_) cuStreamDestroy(stream);
  if (device_a_) cuMemFree(device_a_);
  if (device_b_) cuMemFree(device_b_);
  if (pinned_host_) cuMemFreeHost(pinned_host_);
  if (module_) cuModuleUnload(module_);
  if (context_) cuDevicePrimaryCtxRelease(device_);
}

std::string CudaReplayer::device_name() const {
  char name[256] = {};
  GQ_CU_CHECK(cuDeviceGetName(name, sizeof name, device_));
  return name;
}

CudaReplayer::Clock::time_point CudaReplayer::start(bool wait_for_device) {
  CUstream first = streams_.empty() ? nullptr : streams_.at(workload_.ops.front().stream);
  GQ_CU_CHECK(cuEventRecord(start_event_, first));
  if (wait_for_device) GQ_CU_CHECK(cuEventSynchronize(start_event_));
  return Clock::now();
}

void CudaReplayer::submit(Clock::time_point origin) {
  if (op_groups_.size() == 1) {
    submit_ops(origin, op_groups_.front());
  } else {
    // One thread per group; the first failure is rethrown once all have stopped.
    std::vector<std::exception_ptr> errors(op_groups_.size());
    {
      std::vector<std::jthread> threads;
      for (std::size_t g = 0; g < op_groups_.size(); ++g) {
        threads.emplace_back([this, origin, g, &errors] {
          try {
            GQ_CU_CHECK(cuCtxSetCurrent(context_));
            submit_ops(origin, op_groups_[g]);
          } catch (...) {
            errors[g] = std::current_exception();
          }
        });
      }
    }
    for (const std::exception_ptr& error : errors) {
      if (error) std::rethrow_exception(error);
    }
  }
  for (auto& [id, stream] : streams_) GQ_CU_CHECK(cuEventRecord(end_events_.at(id), stream));
}

void CudaReplayer::submit_ops(Clock::time_point origin, const std::vector<std::size_t>& ops) {
  for (std::size_t i : ops) {
    const Operation& op = workload_.ops[i];
    if (keep_gaps_) {
      auto offset = std::chrono::nanoseconds(std::llround(static_cast<double>(submit_offset_ns(op)) * pace_scale_));
      pace_until(origin + offset - lead_);
    }
    submit_op(op);
  }
}

void CudaReplayer::submit_op(const Operation& op) {
  CUstream stream = streams_.at(op.stream);
  switch (op.kind) {
    case OpKind::kernel: {
      std::uint64_t duration_ns = static_cast<std::uint64_t>(op.duration_ns);
      void* params[] = {&duration_ns};
      GQ_CU_CHECK(cuLaunchKernel(functions_.at(static_cast<std::size_t>(op.kernel)), op.grid[0], op.grid[1],
                                 op.grid[2], op.block[0], op.block[1], op.block[2], op.shared_bytes, stream, params,
                                 nullptr));
      return;
    }
    case OpKind::memset:
      if (op.bytes > 0) GQ_CU_CHECK(cuMemsetD8Async(device_a_, 0, op.bytes, stream));
      return;
    case OpKind::memcpy:
      if (op.bytes > 0) submit_copy(op, stream);
      return;
  }
}

void CudaReplayer::submit_copy(const Operation& op, CUstream stream) {
  void* host = uses_pinned_host(op) ? pinned_host_ : static_cast<void*>(pageable_host_.data());
  switch (op.direction) {
    case CopyDirection::h2d:
      GQ_CU_CHECK(cuMemcpyHtoDAsync(device_a_, host, op.bytes, stream));
      return;
    case CopyDirection::d2h:
      GQ_CU_CHECK(cuMemcpyDtoHAsync(host, device_a_, op.bytes, stream));
      return;
    case CopyDirection::d2d:
    case CopyDirection::other:  // peer and host-to-host copies: replayed as device-local traffic
    case CopyDirection::none:
      GQ_CU_CHECK(cuMemcpyDtoDAsync(device_a_, device_b_, op.bytes, stream));
      return;
  }
}

double CudaReplayer::wait() {
  float longest_ms = 0;
  for (auto& [id, event] : end_events_) {
    GQ_CU_CHECK(cuEventSynchronize(event));
    float ms = 0;
    GQ_CU_CHECK(cuEventElapsedTime(&ms, start_event_, event));
    longest_ms = std::max(longest_ms, ms);
  }
  return longest_ms;
}

}  // namespace gpuqos::replay
