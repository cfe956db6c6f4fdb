// Profiling mode (GPUQOS_PROFILE=FILE): a CUPTI activity session that times, on the device, every
// kernel launch, copy and memset the shim sees, and joins each timing with the descriptor the shim
// built for the op (ProfilingGate), into the training records of the profile file (profile_writer.h).
//
// The join: around each driver call the shim pushes its own op number as a CUPTI external
// correlation id (kind CUSTOM2, leaving CUSTOM0/1 to frameworks). CUPTI then writes an
// EXTERNAL_CORRELATION record pairing it with the call's correlationId, which the KERNEL, MEMCPY and
// MEMSET records of the call carry. Records may arrive in any order and on any thread (CUPTI's
// delivery thread, or the one that flushes): one mutex guards the tables.
//
// A process killed by a signal runs no exit handler: its records stay in the temporary file (a
// profile of its own, which `gpuqos train --from` reads). A flusher thread asks CUPTI for what is
// complete every kFlushPeriod and the writer flushes each buffer it joined, so such a file lacks at
// most the last period's records.
//
// Fail-open: the profile file cannot be created, libcupti is missing or of another CUDA version, an
// activity kind cannot be enabled: one warning, no profile, the program runs as without the shim's
// profiling. CUPTI is started at the first GPU operation rather than when the shim starts, so that
// a libcupti which calls the driver (through our hooks) never does so inside the shim's start-up.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>

#include "activity_records.h"
#include "cupti_library.h"
#include "gpuqos/intercept/settings.h"
#include "gpuqos/ipc/descriptor.h"
#include "kernel_registry.h"
#include "profile_writer.h"

namespace gpuqos::intercept {

class Profiler {
 public:
  static constexpr std::chrono::milliseconds kFlushPeriod{1000};

  using Log = std::function<void(LogLevel, const std::string&)>;

  // Creates the profile's temporary file (a warning and no profiling when it cannot). Kernel names
  // come from `kernels` when the profile is written.
  Profiler(const Settings& settings, const KernelRegistry& kernels, Log log);

  // True while ops are to be profiled. The first call starts CUPTI (the caller holds no lock).
  bool ready() noexcept;

  // An op about to be issued on this thread: keeps `launch` under a new external id and pushes the
  // id. Returns it, or 0 when the op is not profiled. Every non-zero id must get its end().
  std::uint64_t begin(const ipc::OpDescriptor& launch) noexcept;
  // Its driver call returned: pops the id; a refused call makes no record, so it is forgotten.
  void end(std::uint64_t external_id, bool issued) noexcept;

  // A buffer CUPTI completed (its callback; any thread).
  void on_buffer(std::uint8_t* buffer, std::size_t valid_bytes) noexcept;

  // At exit (an atexit handler registered when CUPTI starts, so before the driver's own exit
  // handlers), and again at shutdown: flushes CUPTI, joins what arrived, renames the file into
  // place. Only the first call (in the process that opened the file) does anything. From inside a
  // hooked call (exit() from a signal handler that interrupted one), the frame below may hold
  // CUPTI's locks, ours or the allocator's: nothing is done then, and the records written so far
  // stay in the temporary file, where `gpuqos train` reads them.
  void finish() noexcept;
  // Is this thread inside a hooked driver call (ProfilingGate keeps the count)?
  static bool in_hooked_call() noexcept;

 private:
  enum class State : std::uint8_t { off, idle, starting, running, finished };

  bool start() noexcept;
  bool enable_activities(std::string& why) noexcept;
  void on_record(const CUpti_Activity* record);  // caller holds mutex_
  // A kernel, copy or memset record of `correlation`; nullopt: one that makes no profile record.
  void join_locked(std::uint32_t correlation, std::optional<ActivityTiming> timing);
  void write_locked(const ipc::OpDescriptor& launch, const ActivityTiming& timing);
  void warn_off(const std::string& why) noexcept;
  void flush_periodically(std::stop_token stop) noexcept;  // the flusher thread

  const std::string path_;
  const std::string cupti_library_;
  const int pid_;
  const KernelRegistry& kernels_;
  const Log log_;
  std::atomic<State> state_{State::idle};
  std::atomic<std::uint64_t> next_external_id_{1};
  std::optional<CuptiLibrary> cupti_;  // set by start(), before any callback can run
  std::mutex flusher_mutex_;             // only for flusher_wake_'s waits
  std::condition_variable_any flusher_wake_;
  std::jthread flusher_;                 // started by start(), stopped and joined by finish()

  std::mutex mutex_;  // everything below
  ProfileWriter writer_;
  std::unordered_map<std::uint64_t, ipc::OpDescriptor> launches_;     // external id -> the op
  std::unordered_map<std::uint32_t, std::uint64_t> external_of_;      // correlation id -> external id
  std::unordered_map<std::uint32_t, ActivityTiming> waiting_;         // timings whose pairing is still to come
  std::uint64_t kernels_written_ = 0, copies_written_ = 0, memsets_written_ = 0;
  std::uint64_t unmatched_ = 0;  // records of work the shim did not begin (or lost)
  std::uint64_t graph_nodes_ = 0;  // records of graph launches' nodes (not profiled)
};

// client.cpp: the process's profiler, nullptr when GPUQOS_PROFILE is unset (or before the shim
// started). CUPTI's buffer callbacks carry no user data: they reach the profiler through this.
Profiler* active_profiler() noexcept;

}  // namespace gpuqos::intercept
