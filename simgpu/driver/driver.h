// simgpu's libcuda.so.1: the driver's process-wide state and the objects behind CUDA handles.
//
// Handles (CUcontext, CUstream, ...) point to the structs defined here, and every handle a
// program passes in is checked against the live set before it is used, so a stale or garbage
// handle is an error code, never a crash. One mutex guards all state; the receiver thread
// takes it to apply completions. Data movement of copies happens after the device (simgpud)
// says the copy completed, on the mover thread in completion order, and everything the host can
// see waits for it (Driver::moves), so stream order and events order it as on a GPU.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpuqos/simgpu/module_image.h"
#include "gpuqos/simgpu/protocol.h"

#define SIMGPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpuqos::simgpu::driver {
struct Graph;
}

struct CUctx_st {
  std::uint32_t id = 0;
  int device = 0;
  bool primary = false;
  unsigned flags = 0;
  CUstream_st* legacy = nullptr;
  std::vector<CUstream_st*> streams;  // including legacy and per-thread streams
};

struct CUstream_st {
  std::uint32_t id = 0;
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  bool per_thread = false;
  std::uint64_t submitted = 0;  // ops submitted (sequence numbers from 1)
  std::uint64_t completed = 0;  // ops completed; they complete in order
  std::uint64_t last_op = 0;
  gpuqos::simgpu::driver::Graph* capture = nullptr;  // non-null while capturing
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  bool capture_invalidated = false;  // an error ended the capture: cuStreamEndCapture says so
};

struct CUevent_st {
  CUctx_st* ctx = nullptr;
  unsigned flags = 0;
  std::uint64_t op = 0;  // the latest record; 0 if never recorded
  bool done = true;
  std::int64_t time_ns = 0;
};

struct CUmod_st;

struct CUfunc_st {
  CUmod_st* module = nullptr;
  std::uint32_t kernel_id = 0;  // registered with simgpud
  gpuqos::simgpu::KernelEntry entry;
  int duration_arg = -1;  // the catalog reads this parameter as the duration
};

struct CUmod_st {
  CUctx_st* ctx = nullptr;
  gpuqos::simgpu::ModuleImage image;
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};

// A library is context-independent; its kernels become functions of the current context.
struct CUlib_st {
  std::vector<unsigned char> image_bytes;
  gpuqos::simgpu::ModuleImage image;
  std::map<std::string, std::unique_ptr<struct CUkern_st>> kernels;
  std::map<CUctx_st*, CUmod_st*> modules;  // loaded lazily per context
};

struct CUkern_st {
  CUlib_st* library = nullptr;
  std::string name;
};

namespace gpuqos::simgpu::driver {

// Host-side effect of an op, applied when the device reports it complete.
struct HostAction {
  enum class Kind : std::uint8_t { none, copy, memset, host_func } kind = Kind::none;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  std::shared_ptr<std::vector<unsigned char>> staged;  // pageable source snapshot
  std::uint32_t value = 0;      // memset
  unsigned element_size = 1;    // memset: 1, 2 or 4
  std::size_t pitch = 0;        // memset 2D and copy 2D: bytes between dst's rows (0 = contiguous)
  std::size_t width = 0;        // memset 2D: elements per row
  std::size_t height = 1;       // memset 2D and copy 2D: rows (a copy's are `bytes` long each)
  std::size_t src_pitch = 0;    // copy 2D: bytes between src's rows (a staged copy's are contiguous)
  std::size_t depth = 1;        // copy 3D: slices of `height` rows
  std::size_t slice_pitch = 0;  // copy 3D: bytes between dst's slices
  std::size_t src_slice_pitch = 0;  // copy 3D: bytes between src's slices (a staged copy's are contiguous)
  CUhostFn fn = nullptr;
  void* user_data = nullptr;
  void run() const;
  // What a copy spans from its dst or src, given that side's row and slice pitches.
  std::size_t copy_span(std::size_t row_pitch, std::size_t slice_pitch_of_side) const {
    return (depth - 1) * slice_pitch_of_side + (height <= 1 ? bytes : (height - 1) * row_pitch + bytes);
  }
};

// Host-side effects the mover thread applies, in completion order (Driver::moves).
struct DataMove {
  std::vector<HostAction> actions;
  std::optional<wire::CompletionMsg> signal;  // a completion to signal once they ran
  std::uint64_t host_func_op = 0;             // a host function's op: simgpud is told once it ran
};

struct NodeReport;  // activity.h: what a graph launch reports of the node

struct GraphNode {
  wire::WireOp op{};
  HostAction action;
  std::shared_ptr<const NodeReport> report;  // captured while a libcupti listened; else none
};

struct Graph {
  std::vector<GraphNode> nodes;
};

struct GraphExec {
  std::vector<GraphNode> nodes;
  std::uint32_t id = 0;  // unique in the process, from 1: CUPTI's graphId of its nodes' records
};

struct PendingOp {
  CUstream_st* stream = nullptr;
  std::uint64_t seq = 0;
  std::vector<HostAction> actions;
  CUevent_st* event = nullptr;
};

struct DeviceMemory {
  std::size_t bytes = 0;
  int device = 0;
};

class Driver {
 public:
  // Connects to simgpud on first call; later calls return the cached answer.
  CUresult init();
  bool initialized() const { return initialized_; }

  std::mutex mu;
  std::condition_variable cv;

  // The devices this process sees (simgpud's, under CUDA_VISIBLE_DEVICES), by the process's
  // ordinal, and simgpud's number of each: the wire speaks simgpud's numbers.
  std::vector<wire::DeviceInfo> devices;
  std::vector<std::uint32_t> node_device;
  std::uint32_t wire_device(int ordinal) const { return node_device.at(static_cast<std::size_t>(ordinal)); }
  // Device time 0 on CLOCK_MONOTONIC (hello reply): completions' device times + this = host clock.
  std::int64_t epoch_monotonic_ns = 0;

  // Live handles, for validation.
  std::unordered_set<CUctx_st*> contexts;
  std::unordered_set<CUstream_st*> streams;
  std::unordered_set<CUevent_st*> events;
  // Events of destroyed contexts: gone with them, as on a GPU, but never freed, so that a later use
  // of one is told apart from a bad handle and said (dead_event()).
  std::unordered_set<CUevent_st*> dead_events;
  std::unordered_set<CUmod_st*> modules;
  std::unordered_set<CUfunc_st*> functions;
  std::unordered_set<CUlib_st*> libraries;
  std::unordered_set<CUkern_st*> kernels;
  std::unordered_set<Graph*> graphs;
  std::unordered_set<GraphExec*> graph_execs;
  std::vector<CUctx_st*> primary;          // by device
  std::vector<unsigned> primary_refs;      // retain counts by device
  std::vector<unsigned> primary_flags;
  std::map<std::uintptr_t, DeviceMemory> allocations;  // device pointer -> allocation
  std::map<std::uintptr_t, std::size_t> pinned;        // page-locked host ranges
  std::unordered_map<std::uint64_t, PendingOp> pending;
  // Completed ops' data moves still to apply, oldest first; the front one may be running. A GPU
  // moves device-to-device data on the device: here the host does, and a memmove of hundreds of
  // MB must not hold back the completions behind it (the events a scheduler polls, the streams a
  // program waits on), so the mover thread applies them, and an op is signalled done at once when
  // nothing the host can see depends on its data: its move only writes device memory, from device
  // memory or a staged snapshot, and no earlier completion is still waiting for its own move.
  // Everything the host can see (a copy into host memory, a pinned source it may overwrite next, a
  // host function after such a copy) waits for the moves before it, as it waited before.
  std::deque<DataMove> moves;
  bool moving = false;  // the mover is applying the front one (without the lock)
  // Does an unapplied move read or write [base, base+bytes)? (mu held)
  bool moving_range(std::uintptr_t base, std::size_t bytes) const;
  bool connection_lost = false;

  // Ids for objects simgpud knows.
  std::uint32_t next_ctx = 1, next_stream = 1, next_kernel = 1;
  std::uint64_t next_op = 1, next_request = 1;
  std::uint32_t next_graph_id = 1;

  // Sends one message (caller holds mu). False if the connection is gone.
  bool send(wire::MsgType type, const void* head, std::size_t head_bytes, const void* tail = nullptr,
            std::size_t tail_bytes = 0);
  // Sends a request and waits for its reply (caller holds mu via `lock`).
  std::optional<wire::Reply> request(std::unique_lock<std::mutex>& lock, wire::MsgType type, void* msg,
                                     std::size_t bytes, std::uint64_t* request_field, const void* tail = nullptr,
                                     std::size_t tail_bytes = 0);

 private:
  void receive_loop();
  void on_completion(const wire::CompletionMsg& msg);
  void on_host_func(std::uint64_t op);
  // Marks the op's stream position and event done and forgets it (mu held).
  void signal_completion(const wire::CompletionMsg& msg);
  // Queues a move for the mover thread, starting it on first use (mu held).
  // Takes `move` only if it can (a throw leaves it as it was).
  void queue_move(DataMove& move);
  void move_data();  // the mover thread's loop
  void lose_connection();

  bool initialized_ = false;
  CUresult init_result_ = CUDA_ERROR_NOT_INITIALIZED;
  // A child forked after cuInit: as with the real driver, CUDA cannot be used there (it has none of
  // the parent's threads, and shares the parent's connection); every call says so instead of waiting
  // for replies that would go to the parent.
  bool forked_ = false;
  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();
  int fd_ = -1;
  std::thread receiver_;
  bool mover_started_ = false;
  bool keep_device_data_ = true;  // SIMGPU_DEVICE_DATA (keeps_device_data)
  std::condition_variable moves_cv_;
  std::size_t deferred_signals_ = 0;  // moves in `moves` that carry a signal
  std::size_t moving_bytes_ = 0;      // the bytes the moves in `moves` copy or set
  // Beyond this much data queued, completions wait for their moves again: the mover stays at most
  // this far behind the device (a host memmove runs at a few GB/s, a device's copies at 1.5 TB/s),
  // and so does what a host-visible op or a free may have to wait for.
  static constexpr std::size_t kMaxMovingBytes = std::size_t{1} << 30;
  // A move this short with none queued ahead is made on the receiver thread before the signal, as
  // all were before the mover: some tens of us at most, against a thread hand-off per memset.
  static constexpr std::size_t kInlineMoveBytes = std::size_t{1} << 20;
  // No move of `moves` running or queued any more; for the fallbacks that must not pass them.
  void wait_for_moves(std::unique_lock<std::mutex>& lock);
  std::unordered_map<std::uint64_t, wire::Reply> replies_;
};

// The one driver instance of this process (never destroyed, so exit-time calls stay safe).
Driver& driver();

// Logs a message to stderr once per distinct text (unsupported calls, unknown kernels).
void log_once(const std::string& message);
// The number an environment variable of the process gives (its leading digits), or `unset` when it
// is unset or empty: for the fault-injection hooks of tests.
std::uint64_t env_number(const char* name, std::uint64_t unset);
// True (and said once per API) when `event` died with its context: undefined behaviour on a GPU,
// where the handle may be freed or reused. Called with d.mu held.
bool dead_event(const char* api, CUevent event);

// The calling thread's current context (nullptr if none).
CUctx_st*& current_context();

// Resolves a stream handle as the given API flavour sees it: NULL means the legacy stream, or
// the per-thread default stream for _ptsz/_ptds entry points. Caller holds mu. Null if invalid.
CUstream_st* resolve_stream(CUstream stream, bool per_thread_default);

// Whether a blocking stream of ctx (created without CU_STREAM_NON_BLOCKING, or a per-thread default
// stream) is capturing; with `invalidate`, those captures are invalidated. The legacy stream is
// unusable while one is, as with the real driver: a use of it (simgpu models cuStreamQuery) fails
// with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates the captures; cuStreamIsCapturing only
// says so. Caller holds mu.
bool blocking_stream_captures(const CUctx_st* ctx, bool invalidate);

// Appends an op to a stream (or to the graph it is capturing); caller holds mu.
// Returns the op id (0 if captured into a graph or on error).
CUresult submit(CUstream_st* stream, const wire::WireOp& op, HostAction action, CUevent_st* event = nullptr,
                const std::vector<std::uint64_t>& wait_deps = {}, const std::vector<GraphNode>* graph = nullptr,
                std::uint64_t* op_id = nullptr);

// Blocks until every op submitted to `stream` so far has completed.
CUresult wait_stream(std::unique_lock<std::mutex>& lock, CUstream_st* stream);
CUresult wait_op(std::unique_lock<std::mutex>& lock, CUstream_st* stream, std::uint64_t seq);

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
// The allocation containing [ptr, ptr+bytes), if any.
const DeviceMemory* find_allocation(std::uintptr_t ptr, std::size_t bytes);
// Does the action read or write [base, base+bytes)?
bool touches(const HostAction& action, std::uintptr_t base, std::size_t bytes);
bool is_pinned(const void* ptr, std::size_t bytes);

// Checks cuInit was called and a context is current; the common prologue of most calls.
CUresult require_context(CUctx_st** ctx);

// The function `name` of a module, registered with simgpud on first use. Caller holds mu via lock.
CUresult get_function_locked(std::unique_lock<std::mutex>& lock, CUmod_st* mod, const char* name, CUfunc_st** out);
// A launchable function from a CUfunction or a CUkernel (which stands for its current-context function).
CUresult resolve_function_locked(std::unique_lock<std::mutex>& lock, CUfunction handle, CUfunc_st** out);

CUstream_st* create_stream_locked(CUctx_st* ctx, unsigned flags, int priority, wire::WireStreamKind kind);
void destroy_stream_locked(CUstream_st* stream);
CUctx_st* create_context_locked(int device, unsigned flags, bool primary);
void destroy_context_locked(CUctx_st* ctx);

}  // namespace gpuqos::simgpu::driver
