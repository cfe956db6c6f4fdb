// Workload bookkeeping: offsets, idle gaps, busy times, iteration selection and the summary line.
#include "gpuqos/replay/workload.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace gpuqos::replay {

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kernel: return "kernel";
    case OpKind::memcpy: return "memcpy";
    case OpKind::memset: return "memset";
  }
  return "?";
}

const char* to_string(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::none: return "none";
    case CopyDirection::h2d: return "h2d";
    case CopyDirection::d2h: return "d2h";
    case CopyDirection::d2d: return "d2d";
    case CopyDirection::other: return "other";
  }
  return "?";
}

const char* to_string(HostMemory memory) {
  switch (memory) {
    case HostMemory::none: return "none";
    case HostMemory::pinned: return "pinned";
    case HostMemory::pageable: return "pageable";
    case HostMemory::unknown: return "unknown";
  }
  return "?";
}

namespace {

void shift_and_gap(std::vector<Operation>& ops) {
  if (ops.empty()) return;
  const std::int64_t origin = ops.front().start_ns;
  std::int64_t device_free_at = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    Operation& op = ops[i];
    op.start_ns -= origin;
    if (op.launch_ns) *op.launch_ns -= origin;
    op.idle_gap_ns = i == 0 ? 0 : std::max<std::int64_t>(0, op.start_ns - device_free_at);
    device_free_at = std::max(device_free_at, op.start_ns + op.duration_ns);
  }
}

void compute_iterations(Workload& w) {
  for (std::size_t i = 0; i < w.iterations.size(); ++i) {
    Iteration& it = w.iterations[i];
    const auto in_it = [&](const Operation& op) { return op.iteration == static_cast<int>(i); };
    it.ops = static_cast<std::uint64_t>(std::count_if(w.ops.begin(), w.ops.end(), in_it));
    it.busy_ns = busy_time_ns(w.ops, in_it);
    std::int64_t first = 0;
    std::int64_t last = 0;
    bool any = false;
    for (const Operation& op : w.ops) {
      if (!in_it(op)) continue;
      first = any ? std::min(first, op.start_ns) : op.start_ns;
      last = any ? std::max(last, op.start_ns + op.duration_ns) : op.start_ns + op.duration_ns;
      any = true;
    }
    it.start_ns = first;
    it.span_ns = last - first;
  }
}

}  // namespace

void finalize(Workload& w) {
  std::stable_sort(w.ops.begin(), w.ops.end(),
                   [](const Operation& a, const Operation& b) { return a.start_ns < b.start_ns; });
  shift_and_gap(w.ops);
  w.span_ns = 0;
  for (const Operation& op : w.ops) w.span_ns = std::max(w.span_ns, op.start_ns + op.duration_ns);
  w.busy_ns = busy_time_ns(w.ops, [](const Operation&) { return true; });
  w.kernel_busy_ns = busy_time_ns(w.ops, [](const Operation& op) { return op.kind == OpKind::kernel; });
  if (w.iterations.empty()) {
    w.iterations.push_back(Iteration{"whole trace"});
    for (Operation& op : w.ops) op.iteration = 0;
  }
  compute_iterations(w);
}

Workload select_iteration(const Workload& w, std::size_t index) {
  if (index >= w.iterations.size()) {
    throw WorkloadError("iteration " + std::to_string(index) + " does not exist: " + w.source +
                        " has " + std::to_string(w.iterations.size()) + " (0.." +
                        std::to_string(w.iterations.size() - 1) + ")");
  }
  Workload out;
  out.source = w.source;
  out.gpu = w.gpu;
  out.iterations.push_back(Iteration{w.iterations[index].name});
  std::map<int, int> kernel_map;  // old kernel index -> new, keeping only kernels used
  for (const Operation& op : w.ops) {
    if (op.iteration != static_cast<int>(index)) continue;
    Operation copy = op;
    copy.iteration = 0;
    if (copy.kind == OpKind::kernel) {
      auto [pos, added] = kernel_map.try_emplace(op.kernel, static_cast<int>(out.kernels.size()));
      if (added) out.kernels.push_back(w.kernels.at(static_cast<std::size_t>(op.kernel)));
      copy.kernel = pos->second;
    }
    out.ops.push_back(copy);
  }
  finalize(out);
  return out;
}

std::uint64_t count_ops(const Workload& w, OpKind kind) {
  return static_cast<std::uint64_t>(
      std::count_if(w.ops.begin(), w.ops.end(), [kind](const Operation& op) { return op.kind == kind; }));
}

namespace {

std::string ms(std::int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

}  // namespace

std::string summary(const Workload& w) {
  std::string s = w.source + (w.gpu ? " (" + *w.gpu + ")" : std::string()) + ": " +
                  std::to_string(w.ops.size()) + " ops: " + std::to_string(count_ops(w, OpKind::kernel)) +
                  " kernels (" + std::to_string(w.kernels.size()) + " names), " +
                  std::to_string(count_ops(w, OpKind::memcpy)) + " copies, " +
                  std::to_string(count_ops(w, OpKind::memset)) + " memsets; busy " + ms(w.busy_ns) +
                  " (kernels " + ms(w.kernel_busy_ns) + ") of a " + ms(w.span_ns) + " span; " +
                  std::to_string(w.iterations.size()) + " iteration(s)";
  if (!w.iterations.empty()) {
    const Iteration& first = w.iterations.front();
    s += ", the first (" + first.name + ") " + std::to_string(first.ops) + " ops, span " + ms(first.span_ns) +
         ", busy " + ms(first.busy_ns);
  }
  return s + ".";
}

}  // namespace gpuqos::replay
