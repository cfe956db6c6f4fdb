// simgpu wire protocol between the drop-in libcuda.so.1 (client) and simgpud (server).
//
// Transport: one AF_UNIX SOCK_SEQPACKET connection per client process, so every send is one
// message and message boundaries are kept by the kernel. Each message is a MsgHeader followed
// by `size` payload bytes (at most kMaxPayload). Both ends are on one machine: fixed-width,
// native-endian, trivially copyable structs. The server treats everything it reads as
// untrusted and validates it in one place (decode in the server); the client trusts the server.
//
// Ids: contexts, streams, kernels and ops are numbered by the client (ops from 1, increasing);
// the server puts them in its own namespace per connection, so clients cannot collide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace gpuqos::simgpu::wire {

inline constexpr std::uint32_t kMagic = 0x55504753;  // "SGPU"
inline constexpr std::uint16_t kVersionMajor = 3;  // 3: HelloReply.epoch_monotonic_ns (its devices follow it)
inline constexpr std::uint16_t kVersionMinor = 0;
inline constexpr std::uint32_t kMaxPayload = 64 * 1024;
inline constexpr std::uint32_t kMaxDevices = 16;
inline constexpr std::uint32_t kMaxKernelName = 4096;
inline constexpr std::uint32_t kMaxWaitDeps = 256;
inline constexpr std::uint32_t kMaxGraphNodes = 1024;

enum class MsgType : std::uint32_t {
  // client -> server
  hello = 1,
  create_context,
  destroy_context,
  create_stream,
  destroy_stream,
  register_kernel,  // answered with reply (value0 = duration argument index + 1, 0 if none)
  submit,
  host_func_done,
  mem_alloc,        // answered with reply (status 0 ok, 2 = out of memory)
  mem_free,
  mem_info,         // answered with reply (value0 = free bytes, value1 = total bytes)
  stats,            // answered with stats_reply
  // server -> client
  hello_reply = 100,
  reply,
  completion,
  host_func_run,
  stats_reply,
};

struct MsgHeader {
  MsgType type;
  std::uint32_t size;  // payload bytes after this header
};

struct Hello {
  std::uint32_t magic;
  std::uint16_t version_major;
  std::uint16_t version_minor;
  std::uint32_t pid;
  std::uint32_t observer;  // 1: a monitoring tool (simgpu-stat), not a CUDA program
};

struct DeviceInfo {
  char name[96];
  std::uint8_t uuid[16];
  std::uint64_t memory_bytes;
  std::uint32_t sms;
  std::uint32_t compute_mode;  // ComputeMode
  std::int32_t cc_major;
  std::int32_t cc_minor;
  std::int32_t clock_khz;
  std::int32_t memory_clock_khz;
  std::int32_t memory_bus_width_bits;
  std::int32_t l2_cache_bytes;
};

// Followed by device_count DeviceInfo. status != 0: refused (version mismatch), no devices.
struct HelloReply {
  std::uint32_t status;
  std::uint16_t version_major;
  std::uint16_t version_minor;
  std::uint32_t device_count;
  std::uint32_t session;
  std::int64_t epoch_monotonic_ns;  // device time 0 (simgpud's start) on the CLOCK_MONOTONIC both ends read
};

struct CreateContext {
  std::uint32_t ctx;
  std::uint32_t device;
};

struct DestroyContext {
  std::uint32_t ctx;
};

enum class WireStreamKind : std::uint32_t { legacy_default = 0, blocking = 1, non_blocking = 2 };

struct CreateStream {
  std::uint32_t stream;
  std::uint32_t ctx;
  WireStreamKind kind;
};

struct DestroyStream {
  std::uint32_t stream;
};

// Followed by name_len bytes of the kernel name (not NUL-terminated).
struct RegisterKernel {
  std::uint64_t request;
  std::uint32_t kernel;
  std::uint32_t name_len;
};

enum class WireOpKind : std::uint8_t { kernel = 0, copy, memset, event_record, wait, host_func, graph };
enum class WireEngine : std::uint8_t { h2d = 0, d2h, local };

// One operation (or one node of a graph).
struct WireOp {
  WireOpKind kind;
  WireEngine engine;      // copy, memset
  std::uint8_t pageable;  // copy
  std::uint8_t has_duration_arg;
  std::uint32_t kernel;   // kernel: id from register_kernel
  std::uint64_t blocks;   // kernel
  std::uint64_t bytes;    // copy, memset
  std::uint64_t duration_arg;  // kernel: value of the catalog's from_arg parameter
};

// Followed by `extra` items: OpIds (u64) for wait, WireOp nodes for graph.
// sent_ns: CLOCK_MONOTONIC when the program made the call (0: unknown, use arrival). The
// device timeline uses it, clamped to [device now, arrival], so a server that reads the
// message late does not make the program's work start late.
struct Submit {
  std::uint64_t op;
  std::uint32_t stream;
  std::uint32_t extra;
  std::int64_t sent_ns;
  WireOp spec;
};

struct HostFuncDone {
  std::uint64_t op;
  std::int64_t sent_ns;  // as in Submit
};

struct MemAlloc {
  std::uint64_t request;
  std::uint32_t device;
  std::uint32_t pad;
  std::uint64_t bytes;
};

struct MemFree {
  std::uint32_t device;
  std::uint32_t pad;
  std::uint64_t bytes;
};

struct MemInfo {
  std::uint64_t request;
  std::uint32_t device;
  std::uint32_t pad;
};

struct StatsRequest {
  std::uint64_t request;
};

enum class ReplyStatus : std::int32_t { ok = 0, bad_request = 1, out_of_memory = 2 };

struct Reply {
  std::uint64_t request;
  ReplyStatus status;
  std::uint32_t pad;
  std::uint64_t value0;
  std::uint64_t value1;
};

// status != 0: the server refused the op (bad stream...); it is complete, nothing ran.
struct CompletionMsg {
  std::uint64_t op;
  std::int64_t start_ns;  // device time, ns since simgpud started
  std::int64_t end_ns;
  std::int32_t status;
  std::uint32_t pad;
};

struct HostFuncRun {
  std::uint64_t op;
};

struct WireDeviceStats {
  std::int64_t compute_busy_ns;
  std::int64_t h2d_busy_ns;
  std::int64_t d2h_busy_ns;
  std::int64_t local_busy_ns;
  std::uint64_t kernels_completed;
  std::uint64_t copies_completed;
  std::uint64_t context_switches;
  std::uint64_t memory_used_bytes;
};

// Followed by device_count WireDeviceStats.
struct StatsReply {
  std::uint64_t request;
  std::int64_t now_ns;
  std::uint32_t device_count;
  std::uint32_t clients;
};

#define GPUQOS_WIRE_POD(T) \
  static_assert(std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>, #T " must be POD")
GPUQOS_WIRE_POD(MsgHeader);
GPUQOS_WIRE_POD(Hello);
GPUQOS_WIRE_POD(DeviceInfo);
GPUQOS_WIRE_POD(HelloReply);
GPUQOS_WIRE_POD(Submit);
GPUQOS_WIRE_POD(WireOp);
GPUQOS_WIRE_POD(Reply);
GPUQOS_WIRE_POD(CompletionMsg);
GPUQOS_WIRE_POD(StatsReply);
GPUQOS_WIRE_POD(WireDeviceStats);
#undef GPUQOS_WIRE_POD
static_assert(sizeof(HelloReply) == 24);
static_assert(sizeof(WireOp) == 32);
static_assert(sizeof(Submit) == 56);
static_assert(sizeof(HostFuncDone) == 16);

// CLOCK_MONOTONIC in ns: the clock both ends stamp and time messages with.
std::int64_t monotonic_ns();

// The socket simgpud listens on when none is given: $SIMGPU_SOCKET, else
// $XDG_RUNTIME_DIR/simgpu.sock, else /tmp/simgpu-<uid>.sock.
std::string default_socket_path();

}  // namespace gpuqos::simgpu::wire

namespace gpuqos::simgpu::wire {

// Sends header + head + tail as one record (MSG_NOSIGNAL; EINTR retried). False on error, errno set.
// Blocking or not follows the socket's mode; a non-blocking socket may fail with EAGAIN.
bool send_message(int fd, MsgType type, const void* head, std::size_t head_bytes,
                  const void* tail = nullptr, std::size_t tail_bytes = 0);

}  // namespace gpuqos::simgpu::wire
