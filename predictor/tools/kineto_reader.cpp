// Kineto / PyTorch-profiler traces, through the replayer's converter (gpuqos::replay): kernels
// with grid, block, shared memory and duration (no scalar args: traces do not record them),
// copies with bytes, direction and host memory kind, memsets.
#include "gpuqos/replay/kineto.h"
#include "gpuqos/ipc/registration.h"
#include "read_util.h"

namespace gpuqos::predictor {

namespace {

CopyDirection direction_of(replay::CopyDirection direction) {
  switch (direction) {
    case replay::CopyDirection::h2d: return CopyDirection::h2d;
    case replay::CopyDirection::d2h: return CopyDirection::d2h;
    default: return CopyDirection::d2d;  // DtoD, and PtoP or other device-side copies
  }
}

HostMemory host_memory_of(replay::HostMemory memory) {
  switch (memory) {
    case replay::HostMemory::pinned: return HostMemory::pinned;
    case replay::HostMemory::pageable: return HostMemory::pageable;
    default: return HostMemory::none;
  }
}

}  // namespace

ReadReport read_kineto_text(const std::string& text, const std::string& source, const ReadOptions& options, SampleSet& out) {
  ReadReport report{source, InputFormat::kineto};
  replay::Workload workload;
  try {
    workload = replay::convert_kineto_text(text, source);
  } catch (const std::exception& e) {  // TraceError names the file and the event; bad_alloc and the like too
    return detail::fail(report, e.what());
  }
  std::size_t zero_duration = 0, too_long = 0, unnamed = 0;
  for (const replay::Operation& op : workload.ops) {
    if (op.duration_ns <= 0) {
      ++zero_duration;
      continue;
    }
    if (double(op.duration_ns) > detail::kMaxDurationNs) {
      ++too_long;
      continue;
    }
    if (op.kind == replay::OpKind::kernel) {
      // No name, no kernel gpuqosd can look up (and a store with one does not load: a review).
      if (workload.kernels[std::size_t(op.kernel)].name.empty()) {
        ++unnamed;
        continue;
      }
      // Named as the shim names kernels to gpuqosd (bytes outside printable ASCII escaped).
      KernelSample k{ipc::wire_kernel_name(workload.kernels[std::size_t(op.kernel)].name), {}, double(op.duration_ns)};
      k.shape.grid = op.grid;
      k.shape.block = op.block;
      k.shape.shared_bytes = op.shared_bytes;
      out.kernels.push_back(std::move(k));
      ++report.kernels;
    } else {
      CopySample c;
      c.copy.bytes = op.bytes;
      c.copy.direction = op.kind == replay::OpKind::memset ? CopyDirection::memset : direction_of(op.direction);
      const bool has_host = c.copy.direction == CopyDirection::h2d || c.copy.direction == CopyDirection::d2h;
      c.copy.host_memory = has_host ? host_memory_of(op.host_memory) : HostMemory::none;
      c.duration_ns = double(op.duration_ns);
      out.copies.push_back(c);
      ++report.copies;
    }
  }
  const auto skipped = [&](std::size_t count, const std::string& why) {
    if (count == 0) return;
    report.skipped += count;
    if (report.messages.size() < options.max_messages)
      report.messages.push_back(source + ": " + std::to_string(count) + " GPU ops " + why + " skipped");
  };
  skipped(zero_duration, "with a zero duration (below the trace's time resolution)");
  skipped(too_long, "longer than an hour (a unit mistake or a broken clock, not one op)");
  skipped(unnamed, "that are kernels without a name");
  return report;
}

}  // namespace gpuqos::predictor
