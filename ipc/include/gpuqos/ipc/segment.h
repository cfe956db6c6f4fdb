// The per-client shared-memory segment: one header that defines its layout, and the three rings.
//
// The daemon creates one segment per registered client and the shim maps it. For a shim of protocol
// 1.10 or later it is a sealed memfd passed with the HelloReply (Segment::create_sealed,
// Segment::open_passed): nothing in /dev/shm, so a job with a /dev/shm of its own (a container's)
// maps it all the same, and its size is sealed, so no process holding it can truncate it under the
// shim's mapping (a truncated segment killed the job with SIGBUS). An older shim gets a named
// segment in /dev/shm (Segment::create, Segment::open) and its name in the HelloReply. Layout, fixed
// by the major version:
//
//   [0, 256)                     SegmentHeader
//   kOpsRingOffset               OpsRing          client -> daemon  OpDescriptor (posted work)
//   kCompletionsRingOffset       CompletionsRing  client -> daemon  CompletionDescriptor
//   kGrantsRingOffset            GrantsRing       daemon -> client  GrantDescriptor
//
// The header stores offsets, never pointers; open() refuses a segment whose magic, major version,
// layout or size differ from this build's. A newer minor version only gives meaning to reserved
// bytes, so it is accepted. The header is written once by the daemon before the name is sent;
// afterwards only daemon_heartbeat_ns changes (through std::atomic_ref).
//
// Permissions: a named segment is mode 0600, owned by the client's uid (the daemon, when it runs as
// root, fchowns it), so only that user and root can map it. That user can also truncate it: the
// daemon's mapping is covered by a BusGuard (bus_guard.h), so a truncation turns into faulted(), not
// a SIGBUS. A sealed one has no name: it is reached through the descriptor passed with the reply
// (the daemon and the shim close theirs once it is sent and mapped) and the mappings, and whoever
// holds it cannot truncate it; the daemon's mapping is guarded all the same.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/interprocess/mapped_region.hpp>

#include "gpuqos/ipc/bus_guard.h"
#include "gpuqos/ipc/descriptor.h"
#include "gpuqos/ipc/result.h"
#include "gpuqos/ipc/ring.h"

namespace gpuqos::ipc {

inline constexpr std::uint32_t kSegmentMagic = 0x4d535147;  // "GQSM"
inline constexpr std::uint16_t kSegmentVersionMajor = 1;
inline constexpr std::uint16_t kSegmentVersionMinor = 0;

// Ring capacities (items). Ops: bursts of launches between daemon wake-ups; completions can lag
// behind ops (they are reported in batches); grants are cumulative, so few are ever queued.
inline constexpr std::uint32_t kOpsRingCapacity = 2048;
inline constexpr std::uint32_t kCompletionsRingCapacity = 4096;
inline constexpr std::uint32_t kGrantsRingCapacity = 256;

using OpsRing = SpscRing<OpDescriptor, kOpsRingCapacity>;
using CompletionsRing = SpscRing<CompletionDescriptor, kCompletionsRingCapacity>;
using GrantsRing = SpscRing<GrantDescriptor, kGrantsRingCapacity>;

// A segment name ("/gpuqos-<daemon pid>-<client number>") with its NUL fits in this many bytes.
inline constexpr std::size_t kSegmentNameBytes = 64;

struct SegmentHeader {
  std::uint32_t magic;                        // kSegmentMagic
  std::uint16_t version_major;
  std::uint16_t version_minor;
  std::uint64_t total_bytes;                  // the whole segment, header included
  std::uint64_t ops_ring_offset;              // from the start of the segment
  std::uint64_t completions_ring_offset;
  std::uint64_t grants_ring_offset;
  std::uint32_t ops_ring_capacity;
  std::uint32_t completions_ring_capacity;
  std::uint32_t grants_ring_capacity;
  std::uint32_t op_descriptor_bytes;
  std::uint32_t completion_descriptor_bytes;
  std::uint32_t grant_descriptor_bytes;
  std::uint32_t client_pid;                   // from SO_PEERCRED, for diagnostics
  std::uint32_t client_uid;
  std::uint32_t daemon_pid;
  std::uint32_t reserved0;
  std::uint64_t daemon_heartbeat_ns;          // monotonic_ns(); atomic_ref only (see Segment)
  std::uint8_t reserved[168];
};

namespace segment_layout {
constexpr std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}
}  // namespace segment_layout

inline constexpr std::uint64_t kOpsRingOffset = segment_layout::align_up(sizeof(SegmentHeader), kCacheLineBytes);
inline constexpr std::uint64_t kCompletionsRingOffset =
    segment_layout::align_up(kOpsRingOffset + sizeof(OpsRing), kCacheLineBytes);
inline constexpr std::uint64_t kGrantsRingOffset =
    segment_layout::align_up(kCompletionsRingOffset + sizeof(CompletionsRing), kCacheLineBytes);
inline constexpr std::uint64_t kSegmentBytes = segment_layout::align_up(kGrantsRingOffset + sizeof(GrantsRing), 4096);

static_assert(std::is_trivially_copyable_v<SegmentHeader> && std::is_standard_layout_v<SegmentHeader>);
static_assert(sizeof(SegmentHeader) == 256, "SegmentHeader changed size: bump kSegmentVersionMajor");
static_assert(offsetof(SegmentHeader, ops_ring_offset) == 16);
static_assert(offsetof(SegmentHeader, client_pid) == 64);
static_assert(offsetof(SegmentHeader, daemon_heartbeat_ns) == 80);
static_assert(offsetof(SegmentHeader, daemon_heartbeat_ns) % std::atomic_ref<std::uint64_t>::required_alignment == 0);
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free, "the heartbeat is shared between processes");
static_assert(std::is_standard_layout_v<OpsRing> && std::is_standard_layout_v<CompletionsRing> &&
              std::is_standard_layout_v<GrantsRing>);
static_assert(kOpsRingOffset % alignof(OpsRing) == 0 && kCompletionsRingOffset % alignof(CompletionsRing) == 0 &&
              kGrantsRingOffset % alignof(GrantsRing) == 0);
static_assert(kSegmentBytes < (std::uint64_t{1} << 20), "a segment should stay well under 1 MiB");

// "/gpuqos-<daemon_pid>-<client_number>-<nonce, 16 hex digits>". The nonce is random (the daemon's
// choice): a local user who could foresee a name could create that file in /dev/shm first, and the
// client's registration would be refused.
std::string segment_name(std::uint32_t daemon_pid, std::uint32_t client_number, std::uint64_t nonce);

// A name create() accepts: '/' then 1..62 characters of [A-Za-z0-9._-].
Status check_segment_name(std::string_view name);

// Removes what a gpuqosd killed before its clean-up left: the segments named by segment_name() in
// /dev/shm (where glibc's shm_open keeps them) whose daemon pid is no running process, or is
// `self_pid` (a reused pid: the caller has created none yet). Another user's segments stay (the
// sticky /dev/shm refuses), and so do a live daemon's. Returns the names removed ('/' first);
// never throws (an unreadable /dev/shm removes nothing).
std::vector<std::string> remove_stale_segments(std::uint32_t self_pid) noexcept;

// How old the daemon's heartbeat may be before a shim takes the daemon for gone and runs unmanaged
// (a waiting launch goes ahead). gpuqosd publishes it every 10 ms.
inline constexpr std::int64_t kHeartbeatLimitNs = 100'000'000;

// A mapped segment. Movable, not copyable; unmapped (not removed) on destruction.
class Segment {
 public:
  // Daemon side: creates the named segment (fails if it exists), mode 0600, owned by client_uid,
  // and constructs the header and empty rings. On failure nothing is left behind. The mapping is
  // guarded against truncation (effective once install_bus_guard() ran).
  static Result<Segment> create(const std::string& name, std::uint32_t client_uid, std::uint32_t client_pid = 0);

  // Client side: maps an existing segment and checks its header. Never throws; refuses bad magic,
  // another major version, another layout, or a segment smaller than its header says.
  static Result<Segment> open(const std::string& name);

  // Daemon side (protocol 1.10): the same segment as a memfd called `name` (a name create() takes,
  // for /proc/PID/fd and the logs), its size sealed (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL).
  // take_descriptor() gives the descriptor to pass to the client. On failure nothing is left behind.
  // The client's uid and pid are for its header (diagnostics): the descriptor is what gives access.
  static Result<Segment> create_sealed(const std::string& name, std::uint32_t client_uid, std::uint32_t client_pid = 0);
  // Client side: maps a segment passed as `fd` (create_sealed's; the descriptor stays the caller's)
  // and checks it as open() does; also refuses one that is not a regular file or whose size is not
  // sealed against shrinking (it could be truncated under the mapping). `name` is for messages.
  static Result<Segment> open_passed(int fd, const std::string& name);
  // create_sealed's descriptor, once (-1 for any other segment, or after it was taken): the caller
  // closes it once it is sent. The mapping does not need it.
  int take_descriptor() noexcept { return std::exchange(descriptor_, -1); }
  ~Segment();

  // Removes the name (mapped segments live on until unmapped). False if it did not exist.
  static bool remove(const std::string& name) noexcept;
  // Removes this segment's name, if it has one: a sealed segment's (create_sealed, open_passed) is
  // only a label, and another segment may have it. False if nothing was removed.
  bool remove_name() const noexcept { return named_ && remove(name_); }

  Segment(Segment&& other) noexcept
      : name_(std::move(other.name_)), region_(std::move(other.region_)), guard_(std::move(other.guard_)),
        descriptor_(std::exchange(other.descriptor_, -1)), named_(std::exchange(other.named_, false)) {}
  Segment& operator=(Segment&& other) noexcept;

  const std::string& name() const noexcept { return name_; }
  std::size_t mapped_bytes() const noexcept { return region_.get_size(); }
  // The other side truncated the segment under a guarded mapping: it now reads as zeros.
  bool faulted() const noexcept { return guard_.faulted(); }

  SegmentHeader& header() noexcept { return *static_cast<SegmentHeader*>(region_.get_address()); }
  OpsRing& ops() noexcept { return at<OpsRing>(kOpsRingOffset); }
  CompletionsRing& completions() noexcept { return at<CompletionsRing>(kCompletionsRingOffset); }
  GrantsRing& grants() noexcept { return at<GrantsRing>(kGrantsRingOffset); }

  // Daemon: proves it is alive. Shim: fails open when the heartbeat is older than kHeartbeatLimitNs.
  void publish_heartbeat(std::uint64_t now_ns) noexcept {
    std::atomic_ref<std::uint64_t>(header().daemon_heartbeat_ns).store(now_ns, std::memory_order_release);
  }
  std::uint64_t daemon_heartbeat_ns() noexcept {
    return std::atomic_ref<std::uint64_t>(header().daemon_heartbeat_ns).load(std::memory_order_acquire);
  }

 private:
  Segment(std::string name, boost::interprocess::mapped_region region, bool guard, bool named) noexcept
      : name_(std::move(name)), region_(std::move(region)), named_(named) {
    if (guard) guard_ = BusGuard(region_.get_address(), region_.get_size());
  }

  template <class Map>
  static Result<Segment> map_client_side(const std::string& name, const char* verb, bool named, Map map);

  template <class Ring>
  Ring& at(std::uint64_t offset) noexcept {
    return *std::launder(reinterpret_cast<Ring*>(static_cast<std::byte*>(region_.get_address()) + offset));
  }

  std::string name_;
  boost::interprocess::mapped_region region_;
  BusGuard guard_;  // after region_: unguarded before it is unmapped
  int descriptor_ = -1;  // create_sealed's, until taken
  bool named_ = false;   // reached by its name (create, open), not a passed descriptor
};

}  // namespace gpuqos::ipc
