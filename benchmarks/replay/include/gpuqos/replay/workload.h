// A replayable GPU workload: the device-side operations of a recorded trace, in device-time order.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpuqos::replay {

enum class OpKind : std::uint8_t { kernel, memcpy, memset };
enum class CopyDirection : std::uint8_t { none, h2d, d2h, d2d, other };
enum class HostMemory : std::uint8_t { none, pinned, pageable, unknown };

const char* to_string(OpKind kind);
const char* to_string(CopyDirection direction);
const char* to_string(HostMemory memory);

// One recorded device operation. Times are relative to the workload start (its first op).
struct Operation {
  OpKind kind = OpKind::kernel;
  std::int64_t stream = 0;            // the trace's stream id
  int kernel = -1;                    // kernel: index into Workload::kernels
  std::array<std::uint32_t, 3> grid{1, 1, 1};
  std::array<std::uint32_t, 3> block{1, 1, 1};
  std::uint32_t shared_bytes = 0;     // kernel: shared memory per block, as the trace reports it
  std::uint64_t bytes = 0;            // memcpy, memset
  CopyDirection direction = CopyDirection::none;  // memcpy
  HostMemory host_memory = HostMemory::none;      // memcpy: the host side, when the trace says
  std::int64_t duration_ns = 0;       // as recorded
  std::int64_t start_ns = 0;          // offset from the workload start
  std::int64_t idle_gap_ns = 0;       // time the whole device was idle just before this op
  // When the host launched it (offset from the workload start; negative if launched before the
  // first op started), when the trace links the op to its launch call by correlation id.
  std::optional<std::int64_t> launch_ns;
  int iteration = -1;                 // index into Workload::iterations, -1 if in none
};

// A distinct kernel of the trace and the PTX entry that stands for it in the replay module.
struct KernelInfo {
  std::string name;   // as recorded (usually a demangled C++ signature)
  std::string entry;  // a valid PTX identifier, unique in the workload
};

// A ProfilerStep#N span (or the whole trace when it has none), in workload time.
struct Iteration {
  std::string name;
  std::int64_t start_ns = 0;  // start of its first op
  std::int64_t span_ns = 0;   // first op start to last op end: what one iteration takes
  std::int64_t busy_ns = 0;   // union of its op intervals
  std::uint64_t ops = 0;
};

struct Workload {
  std::string source;                 // the trace file it came from
  std::optional<std::string> gpu;     // the recording GPU's name, when the trace says
  std::vector<KernelInfo> kernels;
  std::vector<Operation> ops;         // sorted by start_ns (ties: trace order)
  std::vector<Iteration> iterations;  // at least one
  std::int64_t span_ns = 0;           // first op start to last op end
  std::int64_t busy_ns = 0;           // union of all op intervals
  std::int64_t kernel_busy_ns = 0;    // union of kernel intervals
};

struct WorkloadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Recomputes start offsets (first op at 0), idle gaps, span, busy times and each iteration's
// figures from ops' start_ns/duration_ns/iteration; sorts ops by start. Keeps iteration names.
void finalize(Workload& workload);

// Keeps only the ops of iteration `index` (it becomes the only iteration) and re-finalizes.
Workload select_iteration(const Workload& workload, std::size_t index);

// Union length of [start, start + duration) intervals of the ops accepted by `keep`.
template <typename Pred>
std::int64_t busy_time_ns(const std::vector<Operation>& ops, Pred keep);

std::uint64_t count_ops(const Workload& workload, OpKind kind);

// When a replay should hand the op to the device, as an offset from the workload start: its
// recorded launch if known (work launched early queues behind the device, as it did when
// recorded), else its recorded start. Never after its start.
inline std::int64_t submit_offset_ns(const Operation& op) {
  return op.launch_ns ? std::min(*op.launch_ns, op.start_ns) : op.start_ns;
}

// JSON form ("format": "gpuqos-workload", "version": 1). Errors name the file and the field.
std::string to_json_text(const Workload& workload);
Workload from_json_text(const std::string& text, const std::string& source_name);
void save_workload(const Workload& workload, const std::filesystem::path& path);
Workload load_workload(const std::filesystem::path& path);

// One paragraph: ops by kind, kernel names, busy time, span, iterations.
std::string summary(const Workload& workload);

template <typename Pred>
std::int64_t busy_time_ns(const std::vector<Operation>& ops, Pred keep) {
  std::int64_t total = 0;
  std::int64_t run_start = 0;
  std::int64_t run_end = -1;
  bool open = false;
  for (const Operation& op : ops) {  // ops are sorted by start
    if (!keep(op)) continue;
    const std::int64_t end = op.start_ns + op.duration_ns;
    if (!open || op.start_ns > run_end) {
      if (open) total += run_end - run_start;
      run_start = op.start_ns;
      run_end = end;
      open = true;
    } else if (end > run_end) {
      run_end = end;
    }
  }
  if (open) total += run_end - run_start;
  return total;
}

}  // namespace gpuqos::replay
