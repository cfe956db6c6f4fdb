// The profiler: CUPTI start-up, the external-id bookkeeping around each op, and the join of CUPTI's
// records with the shim's descriptors.
#include "profiler.h"

#include <unistd.h>

#include <cstdlib>

#include "shim.h"

namespace gpuqos::intercept {
namespace {

constexpr CUpti_ExternalCorrelationKind kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
constexpr std::size_t kBufferBytes = 1 << 20;  // CUPTI's recommendation is 1 to 10 MB
// Bounds on what waits for its other half: a collector must not grow without end if CUPTI stops
// delivering one kind of record (or of work the shim did not begin; graph launches' nodes are not kept).
constexpr std::size_t kMaxPending = 1 << 18;

constexpr CUpti_ActivityKind kActivities[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                              CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
constexpr const char* kActivityNames[] = {"CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "EXTERNAL_CORRELATION"};

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));  // records need 8-byte alignment
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid_bytes) {
  if (Profiler* profiler = active_profiler(); profiler && buffer) profiler->on_buffer(buffer, valid_bytes);
  std::free(buffer);
}

}  // namespace

Profiler::Profiler(const Settings& settings, const KernelRegistry& kernels, Log log)
    : path_(settings.profile_path),
      cupti_library_(settings.cupti_library),
      pid_(static_cast<int>(::getpid())),
      kernels_(kernels),
      log_(std::move(log)) {
  std::string why;
  if (!writer_.open(path_, settings.job, pid_, why)) warn_off(why);
}

void Profiler::warn_off(const std::string& why) noexcept {
  state_.store(State::off, std::memory_order_release);
  try {
    log_(LogLevel::warn, "GPUQOS_PROFILE: " + why + "; no profile is written (the program runs normally)");
  } catch (...) {
  }
}

bool Profiler::ready() noexcept {
  State state = state_.load(std::memory_order_acquire);
  if (state == State::running) return true;
  if (state != State::idle || !state_.compare_exchange_strong(state, State::starting)) return false;
  const bool started = start();
  if (started) {
    State expected = State::starting;  // finish() may have run meanwhile (exit on another thread)
    state_.compare_exchange_strong(expected, State::running);
  }
  return started;
}

bool Profiler::start() noexcept {
  try {
    std::string why;
    // The threads CUPTI starts for its records (at its load or at the first enable) inherit the
    // caller's mask: the program's thread's, unless blocked here.
    const AsyncSignalsBlocked blocked;
    cupti_ = CuptiLibrary::load(cupti_library_, why);
    // Once its callbacks are registered, cupti_ stays: a late buffer may still arrive (and is ignored).
    if (!cupti_ || !enable_activities(why)) {
      {
        std::lock_guard lock(mutex_);
        writer_.discard();
      }
      warn_off(why);
      return false;
    }
    // Registered after the driver's exit handlers (the program has a context by now), so it runs first.
    std::atexit([] {
      if (Profiler* profiler = active_profiler()) profiler->finish();
    });
    flusher_ = start_thread<std::jthread>("gpuqos-profile",
                                          [this](std::stop_token stop) { flush_periodically(std::move(stop)); });
    log_(LogLevel::info, "GPUQOS_PROFILE: profiling with " + cupti_->loaded_as + " into " + path_);
    return true;
  } catch (...) {  // out of memory, or no thread
    if (cupti_) {
      for (const CUpti_ActivityKind kind : kActivities) cupti_->disable(kind);
    }
    {
      std::lock_guard lock(mutex_);
      writer_.discard();
    }
    warn_off("cannot start profiling (out of memory or threads)");
    return false;
  }
}

void Profiler::flush_periodically(std::stop_token stop) noexcept {
  std::unique_lock lock(flusher_mutex_);
  for (;;) {
    flusher_wake_.wait_for(lock, stop, kFlushPeriod, [] { return false; });  // only a stop wakes it early
    if (stop.stop_requested()) return;
    // Flag 0: the buffers whose records are all complete, full or not (records of ops still on the
    // device wait for the next period).
    if (state_.load(std::memory_order_acquire) == State::running) cupti_->flush_all(0);
  }
}

bool Profiler::enable_activities(std::string& why) noexcept {
  if (const CUptiResult r = cupti_->register_callbacks(&buffer_requested, &buffer_completed); r != CUPTI_SUCCESS) {
    why = cupti_->loaded_as + ": cuptiActivityRegisterCallbacks failed: " + cupti_->describe(r);
    return false;
  }
  for (std::size_t i = 0; i < std::size(kActivities); ++i) {
    if (const CUptiResult r = cupti_->enable(kActivities[i]); r != CUPTI_SUCCESS) {
      why = cupti_->loaded_as + ": cuptiActivityEnable(CUPTI_ACTIVITY_KIND_" + kActivityNames[i] +
            ") failed: " + cupti_->describe(r);
      for (std::size_t j = 0; j < i; ++j) cupti_->disable(kActivities[j]);
      return false;
    }
  }
  return true;
}

std::uint64_t Profiler::begin(const ipc::OpDescriptor& launch) noexcept {
  if (state_.load(std::memory_order_acquire) != State::running) return 0;
  const std::uint64_t id = next_external_id_.fetch_add(1, std::memory_order_relaxed);
  try {
    std::lock_guard lock(mutex_);
    if (launches_.size() >= kMaxPending) return 0;
    launches_.emplace(id, launch);
  } catch (...) {
    return 0;
  }
  if (cupti_->push_external_id(kExternalKind, id) != CUPTI_SUCCESS) {
    std::lock_guard lock(mutex_);
    launches_.erase(id);
    return 0;
  }
  return id;
}

void Profiler::end(std::uint64_t external_id, bool issued) noexcept {
  std::uint64_t popped = 0;
  cupti_->pop_external_id(kExternalKind, &popped);
  if (issued) return;
  std::lock_guard lock(mutex_);
  launches_.erase(external_id);
}

void Profiler::on_buffer(std::uint8_t* buffer, std::size_t valid_bytes) noexcept {
  if (state_.load(std::memory_order_acquire) == State::off || static_cast<int>(::getpid()) != pid_) return;
  try {
    std::lock_guard lock(mutex_);
    CUpti_Activity* record = nullptr;
    while (cupti_->get_next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) on_record(record);
    writer_.flush();  // what a kill would otherwise lose with the stdio buffer
  } catch (...) {  // out of memory: the rest of this buffer is lost, the program goes on
  }
}

void Profiler::on_record(const CUpti_Activity* record) {
  ActivityRecord read = read_activity(*record, kExternalKind);
  switch (read.what) {
    case ActivityRecord::What::external: {
      if (external_of_.size() < kMaxPending) external_of_[read.correlation] = read.external_id;
      if (auto it = waiting_.find(read.correlation); it != waiting_.end()) {
        ActivityTiming waiting = std::move(it->second);
        waiting_.erase(it);
        join_locked(read.correlation, std::move(waiting));
      }
      return;
    }
    case ActivityRecord::What::timing: join_locked(read.correlation, std::move(read.timing)); return;
    case ActivityRecord::What::no_timing: join_locked(read.correlation, std::nullopt); return;
    // Kept waiting for an external id that never comes, each held an entry for good (in a program
    // of CUDA graphs, every node of every launch) and filled the table.
    case ActivityRecord::What::graph_node: ++graph_nodes_; return;
    case ActivityRecord::What::other: return;
  }
}

// A record with no timing ends its op's wait without a profile record; one whose op is not known
// yet does not wait for it (the shim begins no op of most such records: a host-to-host copy).
void Profiler::join_locked(std::uint32_t correlation, std::optional<ActivityTiming> timing) {
  const auto external = external_of_.find(correlation);
  if (external == external_of_.end()) {
    if (!timing) return;
    if (waiting_.size() < kMaxPending) {
      waiting_.emplace(correlation, std::move(*timing));
    } else {
      ++unmatched_;
    }
    return;
  }
  const auto launch = launches_.find(external->second);
  external_of_.erase(external);
  if (launch == launches_.end()) {
    if (timing) ++unmatched_;
    return;
  }
  if (timing) write_locked(launch->second, *timing);
  launches_.erase(launch);
}

void Profiler::write_locked(const ipc::OpDescriptor& launch, const ActivityTiming& timing) {
  switch (timing.kind) {
    case ipc::OpKind::kernel: {
      std::string name = kernels_.name_of(launch.kernel_id);
      if (name.empty() || name == "unnamed") name = timing.cupti_name.empty() ? "unnamed" : timing.cupti_name;
      writer_.write_line(kernel_line(name, launch, timing.start_ns, timing.end_ns));
      ++kernels_written_;
      return;
    }
    case ipc::OpKind::copy: {
      const auto direction = timing.direction == ipc::CopyDirection::none ? launch.direction : timing.direction;
      auto host = timing.host_memory == ipc::HostMemory::none ? launch.host_memory : timing.host_memory;
      if (direction != ipc::CopyDirection::h2d && direction != ipc::CopyDirection::d2h) host = ipc::HostMemory::none;
      writer_.write_line(copy_line(direction, host, timing.bytes, timing.start_ns, timing.end_ns));
      ++copies_written_;
      return;
    }
    case ipc::OpKind::memset:
      writer_.write_line(memset_line(timing.bytes, timing.start_ns, timing.end_ns));
      ++memsets_written_;
      return;
    default: return;
  }
}

void Profiler::finish() noexcept {
  if (static_cast<int>(::getpid()) != pid_) return;  // a forked child: the file is its parent's
  const State was = state_.exchange(State::finished, std::memory_order_acq_rel);
  if (was == State::off || was == State::finished) return;
  // exit() from a signal handler that interrupted a hooked call: the frame below may hold CUPTI's
  // locks, ours or the allocator's (a review: the forced flush waited for good on the lock the
  // interrupted cuLaunchKernel held, 2 of 100 runs of intercept_gate_client exit-in-handler under
  // GPUQOS_PROFILE; and committing, fclose's free() on the malloc lock of an interrupted malloc).
  // Nothing more is done then: the records written so far stay in the temporary file, as a killed
  // process's do, where `gpuqos train` reads them.
  if (in_hooked_call()) {
    if (was == State::running) {
      flusher_.request_stop();
      flusher_.detach();  // it may wait for the same locks; the process is ending
    }
    return;
  }
  try {
    if (was == State::running) {  // start() is done with flusher_ (never touched while it runs)
      flusher_.request_stop();
      flusher_.join();
      // Delivers every record complete by now through buffer_completed, on this thread.
      cupti_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      for (const CUpti_ActivityKind kind : kActivities) cupti_->disable(kind);
    }
    std::lock_guard lock(mutex_);
    const std::uint64_t records = writer_.records();
    std::string why;
    if (!writer_.commit(why)) {
      log_(LogLevel::warn, "GPUQOS_PROFILE: " + why + "; no profile is written");
      return;
    }
    const std::string where = writer_.written_to() == path_
                                  ? (writer_.added() ? "added to the profile in " : "to ") + path_
                                  : "to " + writer_.written_to() + " (" + path_ +
                                        (writer_.lock_timed_out() ? " stayed locked by another process, unchanged"
                                                                  : " is not a gpuqos profile") +
                                        ")";
    log_(writer_.written_to() == path_ ? LogLevel::info : LogLevel::warn,
         "GPUQOS_PROFILE: wrote " + std::to_string(records) + " records (" + std::to_string(kernels_written_) +
             " kernels, " + std::to_string(copies_written_) + " copies, " + std::to_string(memsets_written_) +
             " memsets) " + where + "; " +
                             std::to_string(launches_.size()) + " ops without a record, " +
                             std::to_string(unmatched_ + waiting_.size()) + " records without an op" +
                             (graph_nodes_ ? "; " + std::to_string(graph_nodes_) + " of graph launches' nodes, not profiled"
                                           : std::string()));
  } catch (...) {  // out of memory for a message: the profile is written or not, either way quietly
  }
}

}  // namespace gpuqos::intercept
