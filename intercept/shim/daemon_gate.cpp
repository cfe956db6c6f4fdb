// DaemonGate: the hooks' side of the daemon connection, and the monitor thread.
#include "daemon_gate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "describe.h"
#include "gpuqos/ipc/clock.h"
#include "shim.h"

namespace gpuqos::intercept {
namespace {

using CtxGetCurrent = CUresult (*)(CUcontext*);
using CtxGetId = CUresult (*)(CUcontext, unsigned long long*);
using PrimaryCtxRetain = CUresult (*)(CUcontext*, CUdevice);
using PrimaryCtxRelease = CUresult (*)(CUdevice);

constexpr int kWatchIntervalMs = 10;
constexpr auto kRetryInterval = std::chrono::seconds(1);
// After a registration lost to a stale heartbeat: gpuqosd was alive and stalled (CPU starvation, a
// page-in), so the next Hello is sent at once and answered as soon as its loop runs again; the job
// runs unscheduled for the stall, not for a retry interval more. (Other losses wait kRetryInterval:
// a daemon that drops the client would otherwise be asked again and again.)
constexpr auto kRetryAfterStall = std::chrono::milliseconds(10);
constexpr auto kFirstRefusedRetry = std::chrono::milliseconds(1000);
constexpr auto kMaxRefusedRetry = std::chrono::milliseconds(60000);

// cuCtxGetId (CUDA 12.0): no two contexts of the process have the same id, where a handle comes back
// (a primary context made again after its last release often has its old one). 0: not said.
std::uint64_t context_id(CUcontext context) noexcept {
  const auto get_id = driver<CtxGetId>(DriverHelper::ctx_get_id);
  unsigned long long id = 0;
  return context && get_id && get_id(context, &id) == CUDA_SUCCESS ? id : 0;
}

// The context a lifetime call may end (before the call): cuCtxDestroy's, or the device's primary
// context: the handle the program's own retain returned (`known`, from the context hook), else one
// that a retain and a release of ours (the program holds it: net nothing) name. `unknown`: it may
// end one, but which could not be said (our retain failed: a device out of memory or in a sticky
// error), so every context must be treated as ending; so is a green context's destruction, which
// ends the green context's own context and releases the primary one of its device, neither of them
// named by its argument (a rare call, at teardown: the other contexts' pending ops are reported
// early, which is safe). Our retain is not atomic with the state:
// another thread of the program that releases the primary context's last reference in between
// makes it create and destroy one (the known handle avoids that); releasing a context that another
// thread uses while a third resets it is the program's race.
struct EndingContext {
  CUcontext context = nullptr;  // null and not unknown: none ends
  bool unknown = false;
  std::uint64_t id = 0;  // a release's: the context's cuCtxGetId (0: not said)
};
EndingContext ending_context(const Operation& op, CUcontext known) noexcept {
  if (destroys_context(op.hook)) return {op.context};
  if (destroys_green_context(op.hook)) return {nullptr, true};
  if (!primary_active(op.device)) return {};
  const bool release = releases_primary(op.hook);
  if (known) return {known, false, release ? context_id(known) : 0};
  const auto retain = driver<PrimaryCtxRetain>(DriverHelper::primary_ctx_retain);
  const auto release_ours = driver<PrimaryCtxRelease>(DriverHelper::primary_ctx_release);
  CUcontext context = nullptr;
  if (!retain || !release_ours || retain(&context, op.device) != CUDA_SUCCESS) return {nullptr, true};
  const std::uint64_t id = release ? context_id(context) : 0;
  release_ours(op.device);
  return {context, false, id};
}

// After the call (`result`): whether it may have ended the context. A destruction or a reset that
// succeeded did. A release ends the primary one only at its last, and most do not (a program's
// retain and release pairs while its own reference holds it): one that did not is told by the
// device's primary context being still active and still the same context, by its id. Not by the
// active flag alone: another thread may retain it again at once, often with the same handle, a new
// context whose events are not the old one's. Without an id (a driver before CUDA 12.0), any
// release counts: its ops are then reported early and their events leaked, which is safe; querying
// a dead event is not. Asked of the handle only while the primary context is active: the primary
// context keeps its handle when made again, and a driver refuses a handle it does not know.
bool context_gone(const Operation& op, const Ticket& ticket, CUresult result) noexcept {
  if (result != CUDA_SUCCESS) return false;
  if (!releases_primary(op.hook) || ticket.context_id == 0) return true;
  return !primary_active(op.device) || context_id(ticket.context) != ticket.context_id;
}

}  // namespace

std::uint64_t DaemonGate::PrimaryContexts::generation(CUdevice device) noexcept {
  if (!valid(device)) return 0;
  std::lock_guard lock(mutex_);
  return generation_[device];
}

void DaemonGate::PrimaryContexts::retained(CUdevice device, std::uint64_t generation, CUcontext context) noexcept {
  if (!valid(device)) return;
  std::lock_guard lock(mutex_);
  if (generation_[device] == generation) context_[device] = context;
}

CUcontext DaemonGate::PrimaryContexts::known(CUdevice device) noexcept {
  if (!valid(device)) return nullptr;
  std::lock_guard lock(mutex_);
  return context_[device];
}

void DaemonGate::PrimaryContexts::ended(CUdevice device, bool still_active) noexcept {
  if (!valid(device)) return;
  std::lock_guard lock(mutex_);
  ++generation_[device];
  if (!still_active) context_[device] = nullptr;
}

void DaemonGate::PrimaryContexts::released_on_some_device() noexcept {
  for (CUdevice device = 0; valid(device); ++device) {
    if (known(device)) ended(device, primary_active(device));
  }
}

DaemonGate::DaemonGate(Settings settings, Log log)
    : settings_(std::move(settings)), log_(std::move(log)), pass_through_(settings_.debug_counts_path) {
  if (settings_.socket_path.empty()) {  // a bad GPUQOS_SOCKET, said by the settings: no daemon to ask
    gave_up_ = true;
    return;
  }
  try_register(/*at_start=*/true);
  try {
    start_thread<std::thread>("gpuqos-monitor", [this] { monitor(); }).detach();
  } catch (...) {
    log_(LogLevel::warn, "cannot start the gpuqosd monitor thread: no re-registration after a loss");
  }
}

bool DaemonGate::try_register(bool at_start) noexcept {
  try {
    Session::Opened opened = Session::open(settings_, next_session_id_++);
    if (opened.session) {
      // After a warning that it ran unmanaged, being managed again is said as loudly.
      log_(said_running_unmanaged_ ? LogLevel::warn : LogLevel::info,
           std::string(at_start ? "registered" : "re-registered") + " with gpuqosd as client " +
               std::to_string(opened.session->client_number()) +
               (said_running_unmanaged_ ? ": managed again" : ""));
      said_running_unmanaged_ = false;
      refused_retry_ = std::chrono::milliseconds(0);
      if (const std::int64_t offset = opened.session->clock_offset_ns(); offset != 0 && !told_clock_) {
        told_clock_ = true;
        const double ms = static_cast<double>(offset < 0 ? -offset : offset) / 1e6;
        log_(LogLevel::info, "gpuqosd's clock is " + std::to_string(ms) + " ms " + (offset > 0 ? "ahead of" : "behind") +
                                 " this process's (another time namespace): the times it is sent are converted");
      }
      if (opened.lowered && !told_lowered_) {
        told_lowered_ = true;
        log_(LogLevel::warn, "gpuqosd runs this job as low priority: its config does not allow '" + settings_.job +
                                 "' (or this user) high priority");
      }
      copy_chunk_bytes_.store(opened.session->copy_chunk_bytes(), std::memory_order_relaxed);
      managed_devices_.store(opened.session->managed_devices(), std::memory_order_relaxed);
      managed_by_uuid_.store(!opened.session->managed_uuids().empty(), std::memory_order_relaxed);
      set_session(std::move(opened.session));
      return true;
    }
    const bool first_refusal = opened.refused && refused_retry_.count() == 0;
    // Refused: wait longer each time. Anything else (no daemon there now): back to the usual retry,
    // so a daemon started anew is found within a second.
    refused_retry_ = !opened.refused ? std::chrono::milliseconds(0)
                     : first_refusal ? kFirstRefusedRetry
                                     : std::min(2 * refused_retry_, kMaxRefusedRetry);
    // A refusal is said once until the job is managed again, not each time it is asked again.
    if (at_start || first_refusal) {
      said_running_unmanaged_ = true;
      log_(LogLevel::warn, "gpuqosd at " + settings_.socket_path + ": " + opened.why + "; running unmanaged" +
                               (opened.refused ? " (asking again in 1 s, then less often, up to every minute)"
                                               : " (retrying every second)"));
    }
  } catch (...) {  // out of memory: unmanaged
  }
  return false;
}

void DaemonGate::monitor() noexcept {
  // At most one quick retry a second: a daemon that stalls again as soon as it answers is asked no
  // more often than one that dropped us.
  std::chrono::steady_clock::time_point quick_retry{};
  for (;;) {
    std::shared_ptr<Session> session = session_.load();
    if (session && session->watch(kWatchIntervalMs)) continue;
    std::chrono::milliseconds retry = kRetryInterval;
    if (session) {
      try {
        const std::string why = session->lost_reason();
        if (why == kStaleHeartbeat && std::chrono::steady_clock::now() - quick_retry >= kRetryInterval) {
          retry = kRetryAfterStall;
          quick_retry = std::chrono::steady_clock::now();
        }
        // Its heartbeat is on no clock of ours (garbage, or a daemon older than 1.4 in another time
        // namespace): every registration would be lost the same way, a second later. Once is enough.
        gave_up_ = why.find(kFutureHeartbeat) != std::string::npos;
        if (session->take_loss_to_tell()) {
          said_running_unmanaged_ = true;
          log_(LogLevel::warn, "lost gpuqosd (" + why + "); running unmanaged" +
                                   (gave_up_ ? std::string(" from now on") : std::string(" until it is back")));
        }
      } catch (...) {  // out of memory for the message: still unmanaged
      }
      copy_chunk_bytes_.store(0, std::memory_order_relaxed);
      managed_devices_.store(ipc::kAllDevices, std::memory_order_relaxed);
      managed_by_uuid_.store(false, std::memory_order_relaxed);
      set_session(nullptr);
      session.reset();
    }
    if (refused_retry_.count() > 0) retry = refused_retry_;
    std::unique_lock lock(stop_mutex_);
    if (stop_cv_.wait_for(lock, retry, [this] { return stopping_; })) return;
    lock.unlock();
    if (!gave_up_) try_register(/*at_start=*/false);
  }
}


std::uint64_t DaemonGate::copy_chunk_bytes() const noexcept {
  const std::uint64_t bytes = copy_chunk_bytes_.load(std::memory_order_relaxed);
  const std::uint64_t managed = managed_devices_.load(std::memory_order_relaxed);
  if (bytes == 0 || managed == ipc::kAllDevices) return bytes;
  CUcontext context = nullptr;
  const auto get_current = driver<CtxGetCurrent>(DriverHelper::ctx_get_current);
  if (!get_current || get_current(&context) != CUDA_SUCCESS || !context) return bytes;  // the call fails anyway
  const std::uint32_t device = devices_.of(context);
  if (!managed_by_uuid_.load(std::memory_order_relaxed)) return ipc::device_in(managed, device) ? bytes : 0;
  const std::shared_ptr<Session> session = session_.load();
  return session && manages(*session, device) ? bytes : 0;
}

bool DaemonGate::manages(const Session& session, std::uint32_t device) const noexcept {
  return session.manages(device, [&] { return devices_.uuid(device); });
}

void DaemonGate::tell_unmanaged(std::uint32_t device, const Session& session) noexcept {
  if (told_unmanaged_.load(std::memory_order_relaxed) || told_unmanaged_.exchange(true, std::memory_order_relaxed)) return;
  const std::uint64_t managed = session.managed_devices();
  const bool high = !session.low_priority();
  try {
    // A node split between daemons (or a GPU left out on purpose) is said once, as information; a
    // config that names none of this process's devices (ordinals of another node, or of the node
    // where the job sees a CUDA_VISIBLE_DEVICES subset) leaves the job unscheduled: a warning.
    using DeviceGetCount = CUresult (*)(int*);
    const auto get_count = driver<DeviceGetCount>(DriverHelper::device_get_count);
    int count = 0;
    if (!get_count || get_count(&count) != CUDA_SUCCESS) count = 0;
    std::string ordinals;
    bool any_here = false;
    for (std::uint32_t d = 0; d < 64; ++d) {
      if (!ipc::device_in(managed, d)) continue;
      ordinals += (ordinals.empty() ? "" : ", ") + std::to_string(d);
      any_here = any_here || static_cast<int>(d) < count;
    }
    std::string uuids;
    for (const std::string& uuid : session.managed_uuids()) uuids += (uuids.empty() ? "GPU-" : ", GPU-") + uuid;
    for (int d = 0; d < count && !any_here; ++d) any_here = manages(session, static_cast<std::uint32_t>(d));
    const bool none_here = count > 0 && !any_here;
    std::string only = "gpuqosd schedules only";
    if (!ordinals.empty() || uuids.empty()) {
      only += " devices [" + ordinals + "] ([devices] ordinals, numbered as this process numbers its devices)";
    }
    if (!uuids.empty()) {
      only += std::string(ordinals.empty() ? "" : " and") + (session.managed_uuids().size() == 1 ? " the GPU " : " the GPUs ") +
              uuids + " ([devices] uuids)";
    }
    // Which GPU the process's device is, to tie it to the config: its UUID as nvidia-smi writes it.
    const ContextDevices::Uuid none{}, uuid = devices_.uuid(device);
    const std::string named = uuid != none ? " (GPU-" + ipc::uuid_hex(uuid) + ")" : "";
    std::string unknown;
    if (!uuids.empty() && uuid == none) {
      unknown = devices_.uuid_settled(device) ? " (the driver cannot say its UUID)"
                                              : " (the driver has not said its UUID yet: it is asked again)";
    }
    // A high-priority job's work that gpuqosd does not see is work it cannot protect: a warning.
    const std::string unprotected = high ? " (a high-priority job: gpuqosd cannot protect its latency there)" : "";
    log_(none_here || high ? LogLevel::warn : LogLevel::info,
         none_here ? "this process sees " + (count == 1 ? "one device, 0" + named : std::to_string(count) +
                         " devices, 0 to " + std::to_string(count - 1)) + ", and " + only +
                         ": none of its GPU work is scheduled" + unknown + unprotected
                   : only + ": this process's work on device " + std::to_string(device) + named + " runs unscheduled" +
                         unknown + unprotected);
  } catch (...) {  // out of memory for the message: said nothing
  }
}

void DaemonGate::said_uuid(ipc::OpDescriptor& descriptor) const noexcept {
  const ContextDevices::Uuid uuid = devices_.uuid(descriptor.device);
  std::memcpy(descriptor.device_uuid, uuid.data(), sizeof descriptor.device_uuid);
}

// Free slots of the ops ring that arrival marks, and other query marks and synchronisations, leave to GPU work.
constexpr std::uint32_t kArrivalHeadroom = ipc::kOpsRingCapacity / 4;
constexpr std::uint32_t kMarkHeadroom = ipc::kOpsRingCapacity / 16;

// A kernel (by its id) not timed for this long is timed at its next low-priority launch, at most one
// such a thread this often (DaemonGate::post).
constexpr std::int64_t kKernelRetimeNs = 100'000'000;
constexpr std::int64_t kKernelTimedSpacingNs = 250'000;

// Waited calls of one thread timed on the device at most this often (DaemonGate::post).
constexpr std::int64_t kTimedCallSpacingNs = 1'000'000;

// A high-priority kernel not timed for this long is timed at its next launch, at most one such a
// thread this often: at most a hundred launches a second of a thread pay the two event records.
constexpr std::int64_t kHighKernelRetimeNs = 1'000'000'000;
constexpr std::int64_t kHighKernelTimedSpacingNs = 10'000'000;

Ticket DaemonGate::post(const Operation& op, const std::shared_ptr<Session>& session) noexcept {
  Ticket ticket;
  ticket.posted_ns = ipc::monotonic_ns();
  const auto get_current = driver<CtxGetCurrent>(DriverHelper::ctx_get_current);
  if (!get_current || get_current(&ticket.context) != CUDA_SUCCESS || !ticket.context) return {};  // the call fails
  note_cuda_used();
  try {
    const std::uint32_t device = devices_.of(ticket.context);
    if (!manages(*session, device)) {  // not the daemon's device: the call goes ahead unposted
      tell_unmanaged(device, *session);
      if (session->unscheduled_to_tell(device)) {  // for gpuqosd's status, once its UUID is known
        const ContextDevices::Uuid uuid = devices_.uuid(device);
        if (uuid != ContextDevices::Uuid{} || devices_.uuid_settled(device)) session->tell_unscheduled(device, uuid);
      }
      return {};
    }
    ipc::OpDescriptor descriptor;
    if (!describe(op, device, ticket.posted_ns, kernels_, descriptor)) return {};
    if (descriptor.kind == ipc::OpKind::kernel) descriptor.sm_count = devices_.sm_count(device);
    said_uuid(descriptor);
    const bool low = session->low_priority();  // the daemon's answer, not our claim
    if (!session->post(descriptor, kernels_, /*may_wait=*/low)) {
      if (session->ops_lost_to_full_ring() > 0 && !told_full_ring_.exchange(true)) {
        log_(LogLevel::warn, "gpuqosd is not keeping up with this process: its ops ring (or socket) was full, so work went to the "
                             "GPU without being posted (gpuqosd does not count it; said once)");
      }
      return {};
    }
    ticket.seq = descriptor.seq;
    ticket.session = session->id();
    std::atomic<std::int64_t>* kernel_timed = descriptor.kind == ipc::OpKind::kernel && descriptor.kernel_id > 0 &&
                                                      descriptor.kernel_id <= kernel_timed_ns_.size()
                                                  ? &kernel_timed_ns_[descriptor.kernel_id - 1]
                                                  : nullptr;
    thread_local std::int64_t last_kernel_timed_ns = 0;
    const auto time_on_device = [&] {
      ticket.start_ns = ipc::monotonic_ns();  // after posting (a kernel's name may have been sent): the call's own time
      ticket.start_event = completions_.record_start(ticket.context, op);
      ticket.call_began_ns = ipc::monotonic_ns();
      // Only a kernel timed counts as timed (no event: asked again at its next launch).
      if (kernel_timed && ticket.start_event) {
        last_kernel_timed_ns = ticket.posted_ns;
        kernel_timed->store(ticket.posted_ns, std::memory_order_relaxed);
      }
    };
    // Not cuLaunchCooperativeKernelMultiDevice: it names its streams in its parameters, not to us (a
    // start event on the default stream would be work the program never asked for).
    const bool timeable = op.hook != HookId::hook_cuLaunchCooperativeKernelMultiDevice;
    if (!low) {
      // A high-priority launch carries as little as possible, so its ops are reported coarse; but a
      // kernel is timed on the device once a second (at most one launch per thread per 10 ms): an
      // untrained gpuqosd otherwise never learned a high-priority job's kernels and predicted them at
      // the global mean (a user test: 0.5-ms kernels at about 2.3 ms beside 2-ms training kernels),
      // and another high-priority job's posted work counts ahead of a query on an in-order device.
      if (timeable && kernel_timed &&
          ticket.posted_ns - kernel_timed->load(std::memory_order_relaxed) >= kHighKernelRetimeNs &&
          ticket.posted_ns - last_kernel_timed_ns >= kHighKernelTimedSpacingNs) {
        time_on_device();
      }
      return ticket;
    }
    if (!session->granted(ticket.seq)) {
      ticket.waited = true;
      session->wait_for_grant(ticket.seq);  // lost meanwhile: released, the call goes ahead
      // The completion's start is the call, not the post: a duration that included the hold
      // would teach the predictor that held ops are long, and hold them longer.
      ticket.posted_ns = ipc::monotonic_ns();
    }
    // Timed on the device (a start event before the call, its end's right after it), at most once a
    // millisecond per thread: a job whose every op waits (credit 0) paid 16-22 % of its throughput
    // on simgpu for timing each; a thousand samples a second is plenty to learn from. An op spent
    // on credit too (two event records a millisecond, behind no wait): a user test's best-effort
    // job ran on credit before any high-priority job came, so gpuqosd learned none of its
    // durations, and its 3-ms kernels, predicted at the 10-us placeholder, ran far past the bound
    // under the first queries.
    // A kernel not timed for kKernelRetimeNs is also timed, at most once per kKernelTimedSpacingNs per
    // thread: the once-a-millisecond rule alone takes the first op after each gap, so a loop that
    // issues an iteration in under a millisecond and then synchronises had only its first op (often a
    // copy or a memset) timed, and its kernels stayed at the placeholder (a review).
    thread_local std::int64_t last_timed_ns = 0;
    const bool spaced = ticket.posted_ns - last_timed_ns >= kTimedCallSpacingNs;
    const bool kernel_due = kernel_timed && ticket.posted_ns - kernel_timed->load(std::memory_order_relaxed) >= kKernelRetimeNs &&
                            ticket.posted_ns - last_kernel_timed_ns >= kKernelTimedSpacingNs;
    if ((spaced || kernel_due) && timeable) {
      if (spaced) last_timed_ns = ticket.posted_ns;
      time_on_device();
    }
    return ticket;
  } catch (...) {
    return {};
  }
}

// The calls that block until work drained (the queries only poll: posting each would flood).
static bool waits_for_work(HookId hook) noexcept {
  switch (hook) {
    case HookId::hook_cuCtxSynchronize:
    case HookId::hook_cuCtxSynchronize_v2:
    case HookId::hook_cuStreamSynchronize:
    case HookId::hook_cuStreamSynchronize_ptsz:
    case HookId::hook_cuEventSynchronize: return true;
    default: return false;
  }
}

void DaemonGate::post_sync_mark(std::uint64_t stream) noexcept {
  ipc::OpDescriptor mark{};
  mark.kind = ipc::OpKind::sync;
  mark.stream = stream;
  mark.posted_ns = ipc::monotonic_ns();
  post_mark(mark);
}

void DaemonGate::synchronous_copy_returned(const Operation& op) noexcept {
  // Into host memory only: a synchronous copy from the host may return before its DMA is done,
  // and starts a request far more often than it ends one; one within the device does not wait.
  if (op.category != Category::copy || posted_copy_direction(op) != ipc::CopyDirection::d2h) return;
  post_sync_mark(stream_key(op));  // the legacy stream's key, or the thread's per-thread one
  completions_.nudge();
}

void DaemonGate::post_mark(ipc::OpDescriptor descriptor) noexcept {
  std::shared_ptr<Session> session = session_.load();
  if (!session || !session->alive()) return;
  // A daemon older than 1.2 would refuse the kind and drop the whole connection.
  if (descriptor.kind == ipc::OpKind::query_arrived && !session->takes_arrivals()) return;
  // Query marks are about the job, not a device, and often come from a thread with no context
  // (a server's receiving thread, a worker before its first CUDA call): device 0 then.
  CUcontext context = nullptr;
  const auto get_current = driver<CtxGetCurrent>(DriverHelper::ctx_get_current);
  const bool has_context = get_current && get_current(&context) == CUDA_SUCCESS && context;
  if (has_context) {
    note_cuda_used();
    descriptor.device = devices_.of(context);
    said_uuid(descriptor);
    // A synchronisation of a device the daemon does not schedule waits for nothing it knows of.
    if (descriptor.kind == ipc::OpKind::sync && !manages(*session, descriptor.device)) return;
  } else if (descriptor.kind == ipc::OpKind::sync) {
    return;
  }
  // A full ring drops the mark, never blocks. Arrivals (which a server's receiving threads may say
  // in a flood) leave a quarter of it to GPU work, which a high-priority job posts without waiting
  // either; begins, ends and synchronisations, whose loss merges two queries, only the last slots.
  const bool arrival = descriptor.kind == ipc::OpKind::query_arrived;
  if (!session->post(descriptor, kernels_, /*may_wait=*/false, arrival ? kArrivalHeadroom : kMarkHeadroom) &&
      session->alive() && !told_marks_dropped_.exchange(true)) {
    log_(LogLevel::warn, "gpuqosd is not keeping up with this process: its ops ring is nearly full, so query marks "
                         "are dropped to keep room for GPU work (said once)");
  }
}

void DaemonGate::mark_query(QueryMark mark) noexcept {
  ipc::OpDescriptor descriptor{};
  if (mark == QueryMark::end) {
    descriptor.kind = ipc::OpKind::query_end;
    descriptor.posted_ns = ipc::monotonic_ns();
    return post_mark(descriptor);
  }
  // Stamped before the lock (posting may wait for another thread's post), posted under it: an
  // arrival reaches the daemon before the begin that takes it.
  descriptor.posted_ns = ipc::monotonic_ns();
  std::lock_guard lock(arrivals_mutex_);
  if (mark == QueryMark::dropped) {  // the oldest request waiting will not be begun: the next begin takes the one after
    if (!arrivals_.empty()) arrivals_.pop_front();
    return;
  }
  if (mark == QueryMark::arrived) {
    descriptor.kind = ipc::OpKind::query_arrived;
    if (!arrivals_.empty()) descriptor.posted_ns = std::max(descriptor.posted_ns, arrivals_.back());  // in order
    try {
      if (arrivals_.size() >= kMaxArrivals) arrivals_.pop_front();
      arrivals_.push_back(descriptor.posted_ns);
    } catch (...) {  // out of memory: this request goes unpaired, the program goes on
      return;
    }
  } else {
    descriptor.kind = ipc::OpKind::query_begin;
    if (!arrivals_.empty()) {
      descriptor.arrived_ns = arrivals_.front();
      arrivals_.pop_front();
    }
  }
  post_mark(descriptor);
}

Ticket DaemonGate::before(const Operation& op) noexcept {
  pass_through_.before(op);
  if (op.category == Category::lifetime) {
    completions_.record_deferred_now();  // no deferred event may be recorded on a dead handle
    if (destroys_stream(op.hook)) return {};
    // The context may end: its events with it. Nothing of it is polled until after the call.
    const EndingContext named = ending_context(op, primaries_.known(op.device));
    Ticket ending;
    ending.context = named.context;
    ending.any_context = named.unknown;
    ending.context_id = named.id;
    ending.posted_ns = ipc::monotonic_ns();
    completions_.context_ending(ending.context, ending.posted_ns, ending.any_context);
    completions_.drop_event_pool(/*destroy_events=*/true);
    return ending;
  }
  if (op.category == Category::sync && waits_for_work(op.hook)) {
    // The program is about to wait: where an inferred query closes. stream 0 = the whole context
    // (cuEventSynchronize also reports 0: which stream recorded the event is not tracked).
    const bool on_stream = op.hook == HookId::hook_cuStreamSynchronize || op.hook == HookId::hook_cuStreamSynchronize_ptsz;
    post_sync_mark(on_stream ? stream_key(op) : 0);
    completions_.record_deferred_now();  // off the launch path, before the wait: done when it returns
    return {};
  }
  if (op.category == Category::context) {
    Ticket retain;
    retain.primary_generation = primaries_.generation(op.device);
    return retain;
  }
  if (!is_gpu_work(op.category) || op.captured) return {};
  std::shared_ptr<Session> session = session_.load();
  if (!session || !session->alive()) return {};
  return post(op, session);
}


void DaemonGate::after(const Operation& op, Ticket ticket, CUresult result) noexcept {
  pass_through_.after(op, ticket, result);
  if (op.category == Category::naming && result == CUDA_SUCCESS) learn_kernel_name(op, kernels_);
  if (op.category == Category::context && result == CUDA_SUCCESS && op.out_handle) {
    primaries_.retained(op.device, ticket.primary_generation, *static_cast<CUcontext*>(op.out_handle));
  }
  if (op.category == Category::sync) completions_.nudge();
  if (op.category == Category::lifetime && !destroys_stream(op.hook)) {
    if (destroys_green_context(op.hook) && result == CUDA_SUCCESS) {
      primaries_.released_on_some_device();
    } else if (!destroys_context(op.hook) && result == CUDA_SUCCESS) {  // a primary context's release or reset
      primaries_.ended(op.device, !resets_primary(op.hook) && primary_active(op.device));
    }
    // Pooled events of a context not named may have died with it: forgotten (leaked, not used).
    if (!ticket.context) completions_.drop_event_pool(/*destroy_events=*/false);
    const bool gone = context_gone(op, ticket, result);
    // Its modules' functions went with it: their handles may be given again to other kernels. Not
    // on a release told as gone without an id (a driver before 12.0, which also cannot name a
    // kernel again): most releases end nothing, and the names would be lost.
    if (gone && (!releases_primary(op.hook) || ticket.context_id != 0)) kernels_.forget_context_bound();
    // So may its device be: a later context given its handle may be of another device.
    if (ticket.any_context) {
      devices_.forget_all();
    } else if (ticket.context && gone) {
      devices_.forget(ticket.context);
    }
    completions_.context_ended(ticket.context, ticket.posted_ns, gone, ticket.any_context);
    return;
  }
  if (ticket.seq == 0) return;
  std::shared_ptr<Session> session = session_.load();
  if (session && session->id() == ticket.session && session->alive()) {
    // A call that waited for its grant records its own end event (the cost hides behind the wait),
    // and so does one timed on the device; high priority, and the rest of low priority spending
    // credit, add nothing: the completion thread records.
    completions_.track(std::move(session), ticket, op, result,
                       /*record_inline=*/ticket.waited || ticket.start_event != nullptr);
  } else {
    completions_.give_back(ticket.context, ticket.start_event);
  }
}

void DaemonGate::set_session(std::shared_ptr<Session> session) noexcept {
  {
    std::lock_guard lock(exit_view_mutex_);
    exit_view_ = session;
  }
  session_.store(std::move(session));
}

void DaemonGate::shutdown() noexcept {
  // A loss a waiter found just before the program ended, which the monitor had no time to say.
  // Nothing here may wait for what a call interrupted by an exit() holds: said if it can be.
  std::shared_ptr<Session> session;
  if (std::unique_lock lock(exit_view_mutex_, std::try_to_lock); lock.owns_lock()) session = exit_view_;
  if (session && !session->alive()) {
    if (const auto why = session->lost_reason_if_free(); why && session->take_loss_to_tell()) {
      try {
        log_(LogLevel::warn, "lost gpuqosd (" + *why + "); running unmanaged");
      } catch (...) {  // out of memory for the message
      }
    }
  }
  completions_.stop();
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  pass_through_.shutdown();
}

}  // namespace gpuqos::intercept
