// Registration over the daemon's Unix socket (SOCK_SEQPACKET: one send is one record).
//
//   shim -> daemon  Hello        who am I: priority, device, job name (versioned)
//   daemon -> shim  HelloReply   ok + the segment to map and the client number, or a refusal
//   shim -> daemon  KernelName   the name behind a kernel id, once per id, before its first op
//
// A control client (the gpuqos CLI) sends a ControlRequest as its first record instead of a Hello
// and gets one ControlReply (a header and up to kMaxControlTextBytes of JSON text) back.
//
// Every record opens with its own magic and then the protocol version (Hello and HelloReply), a
// prefix that never changes, so either side can recognise the other's version and refuse
// politely. Versioning rules: a change that an older peer cannot ignore bumps the major version
// (the other side refuses); a minor version may only append fields to the end of a record, which
// an older peer skips (a record from a newer minor may be longer than ours) and a newer peer
// reads as absent (a record from an older minor is exactly that minor's size).
//
//   1.0  the first protocol
//   1.1  HelloReply appends effective_priority and copy_chunk_bytes
//   1.2  the daemon takes query_arrived marks (descriptor.h); no record changes
//   1.3  HelloReply appends managed_devices
//   1.4  HelloReply appends daemon_clock_ns
//   1.5  a kernel's OpDescriptor says its device's SM count (sm_count, reserved before: an older
//        daemon ignores it); no record changes
//   1.6  the ops ring's doorbell: an ok HelloReply to a Hello of 1.6 or later comes with one end of
//        a datagram socket pair (SCM_RIGHTS). The daemon's loop is then the ring's consumer and sleeps in epoll, not on the
//        ring's futex: it sets the ring's consumer word before it sleeps, and a shim that finds the
//        word set after a push (SpscRing::try_push with a wake) sends a datagram instead of
//        waking the futex; the same for the completions ring, whose word the loop sets while it
//        holds ops (a completion may release them). An older shim's ops ring is consumed by a
//        thread of the daemon, as before; no record changes
//   1.7  an OpDescriptor says its device's UUID (device_uuid, reserved before: an older daemon
//        ignores it, and a newer one takes all zero as not said); no record changes
//   1.8  HelloReply appends managed_uuid_count, reserved2 and managed_uuids: GPUs the daemon
//        schedules named by UUID (an older shim is sent every device instead)
//   1.9  the shim's UnscheduledDevice record (sent only to a daemon of 1.9 or later)
//   1.10 the segment as a descriptor: an ok HelloReply to a Hello of 1.10 or later passes a sealed
//        memfd (segment.h, Segment::create_sealed) first and the doorbell, if any, second;
//        segment_name is then the memfd's name, for messages (nothing in /dev/shm). An older shim
//        gets a named segment and only the doorbell, as before; no record changes
//
// Everything the daemon receives is untrusted: decode_* validate every field and return the reason
// for rejecting garbage. Who the client is (pid, uid, gid) comes from the kernel via
// peer_credentials(), never from a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <type_traits>
#include <vector>

#include "gpuqos/ipc/result.h"

namespace gpuqos::ipc {

inline constexpr std::uint32_t kHelloMagic = 0x4c485147;       // "GQHL"
inline constexpr std::uint32_t kHelloReplyMagic = 0x52485147;  // "GQHR"
inline constexpr std::uint32_t kKernelNameMagic = 0x4e4b5147;  // "GQKN"
inline constexpr std::uint32_t kControlRequestMagic = 0x54435147;  // "GQCT"
inline constexpr std::uint32_t kControlReplyMagic = 0x52435147;    // "GQCR"
inline constexpr std::uint32_t kUnscheduledDeviceMagic = 0x44555147;  // "GQUD"
inline constexpr std::uint16_t kProtocolVersionMajor = 1;
// 1.1: HelloReply's effective_priority and copy_chunk_bytes. 1.2: the daemon takes query_arrived
// marks (descriptor.h); a shim posts them only to a daemon that says 1.2 or later. 1.3: HelloReply's
// managed_devices. 1.4: HelloReply's daemon_clock_ns. 1.5: OpDescriptor's sm_count. 1.6: the ops
// ring's doorbell (a datagram socket with the HelloReply). 1.7: OpDescriptor's device_uuid. 1.8:
// HelloReply's managed_uuids. 1.9: the shim's UnscheduledDevice record; a shim sends it only to a
// daemon that says 1.9 or later (an older one drops a client for a record it does not know). 1.10:
// the segment passed as a sealed memfd.
inline constexpr std::uint16_t kProtocolVersionMinor = 10;

inline constexpr std::size_t kJobNameBytes = 64;        // with its NUL
inline constexpr std::size_t kReplyMessageBytes = 128;  // with its NUL
inline constexpr std::uint32_t kMaxDevices = 64;
inline constexpr std::uint32_t kMaxKernelNameBytes = 4096;
inline constexpr std::uint32_t kMaxManagedUuids = 16;
inline constexpr std::size_t kUuidTextBytes = 36;  // "5053021f-f19c-8f3e-af75-ba138af7d608"

inline constexpr std::size_t kMaxRecordBytes = 16 + kMaxKernelNameBytes;  // the largest record

// A control reply is one record of at most this many bytes (header included).
inline constexpr std::size_t kMaxControlRecordBytes = 64 * 1024;

enum class Priority : std::uint8_t { low = 0, high = 1 };
enum class HelloStatus : std::uint32_t { ok = 0, version_mismatch = 1, refused = 2 };

struct Hello {
  std::uint32_t magic;  // kHelloMagic
  std::uint16_t version_major;
  std::uint16_t version_minor;
  Priority priority;
  std::uint8_t reserved[3];
  std::uint32_t device;
  char job_name[kJobNameBytes];  // printable ASCII, 1..63 bytes, NUL-terminated
};

struct HelloReply {
  std::uint32_t magic;  // kHelloReplyMagic
  std::uint16_t version_major;  // the daemon's
  std::uint16_t version_minor;
  HelloStatus status;
  std::uint32_t client_number;
  char segment_name[64];                // ok: the segment to open (segment.h); else empty
  char message[kReplyMessageBytes];     // refused / version_mismatch: why, for the shim's warning
  // 1.1 (a 1.0 reply is kHelloReplyBytesV1_0 long; decode_hello_reply leaves these zero for it,
  // so a shim reads them only when version_minor >= 1).
  // ok: the class the daemon runs this client as: the Hello's claim, or low when the daemon's
  // config does not allow the job or the user to run high priority (the shim must then wait for
  // grants as low priority does). Never higher than the claim.
  Priority effective_priority;
  std::uint8_t reserved[7];
  // ok: low-priority 1-D copies larger than this are issued as chunks of at most this many bytes,
  // each posted and granted on its own, so a high-priority copy can slip in between; 0: never split.
  std::uint64_t copy_chunk_bytes;
  // 1.3 (a 1.1 or 1.2 reply is kHelloReplyBytesV1_2 long): ok: bit d set when the daemon schedules
  // the work of device d (its config's [devices] ordinals); the shim issues ops on other devices
  // straight to the driver, unposted. A reply older than 1.3 means every device (kAllDevices).
  std::uint64_t managed_devices;
  // 1.4 (a 1.3 reply is kHelloReplyBytesV1_3 long): the daemon's CLOCK_MONOTONIC as it made the
  // reply. Every time in the segment is on the daemon's clock, which is the shim's unless the two
  // run in different time namespaces (CLOCK_MONOTONIC has an offset per namespace): the shim tells
  // from this and the Hello's round trip, and converts what it posts. 0 from an older daemon.
  std::int64_t daemon_clock_ns;
  // 1.8 (a 1.4 to 1.7 reply is kHelloReplyBytesV1_7 long): ok: the GPUs the daemon schedules named
  // by UUID ([devices] uuids), besides managed_devices' ordinals (which are then 0 for none): the
  // first managed_uuid_count entries, each the start of a UUID's text past "GPU-" (lowercase hex
  // digits and dashes, 1 to kUuidTextBytes), NUL-terminated. The shim schedules a device whose
  // ordinal is in managed_devices or whose UUID (cuDeviceGetUuid) starts with one of these.
  std::uint32_t managed_uuid_count;
  std::uint32_t reserved2;
  char managed_uuids[kMaxManagedUuids][kUuidTextBytes + 4];
};
inline constexpr std::size_t kHelloReplyBytesV1_0 = 208;  // up to and including message
inline constexpr std::size_t kHelloReplyBytesV1_2 = 224;  // up to and including copy_chunk_bytes
inline constexpr std::size_t kHelloReplyBytesV1_3 = 232;  // up to and including managed_devices
inline constexpr std::size_t kHelloReplyBytesV1_7 = 240;  // up to and including daemon_clock_ns
inline constexpr std::uint64_t kAllDevices = ~std::uint64_t{0};
// The smallest non-zero copy_chunk_bytes the shim takes: it raises a smaller one a daemon sends (a
// 1-byte chunk would cost a grant round trip per byte). gpuqosd's config refuses less as well.
inline constexpr std::uint64_t kMinCopyChunkBytes = 64 * 1024;
// Is `device` one of the mask's (HelloReply::managed_devices)?
constexpr bool device_in(std::uint64_t mask, std::uint32_t device) noexcept {
  return device < 64 && ((mask >> device) & 1u) != 0;
}
static_assert(kMaxDevices <= 64, "managed_devices has a bit per device");
// The mask of the listed device ordinals (those the protocol cannot name are left out).
constexpr std::uint64_t device_mask(std::span<const std::uint32_t> ordinals) noexcept {
  std::uint64_t mask = 0;
  for (const std::uint32_t ordinal : ordinals) {
    if (ordinal < kMaxDevices) mask |= std::uint64_t{1} << ordinal;
  }
  return mask;
}

// Followed by name_bytes bytes of the name (no NUL).
struct KernelNameHeader {
  std::uint32_t magic;  // kKernelNameMagic
  std::uint32_t kernel_id;  // != 0, as in OpDescriptor::kernel_id
  std::uint32_t name_bytes;  // 1..kMaxKernelNameBytes
  std::uint32_t reserved;
};

static_assert(std::is_trivially_copyable_v<Hello> && std::is_standard_layout_v<Hello> && sizeof(Hello) == 80);
static_assert(std::is_trivially_copyable_v<HelloReply> && std::is_standard_layout_v<HelloReply> &&
              sizeof(HelloReply) == kHelloReplyBytesV1_7 + 8 + kMaxManagedUuids * (kUuidTextBytes + 4));
static_assert(offsetof(HelloReply, effective_priority) == kHelloReplyBytesV1_0 &&
              offsetof(HelloReply, copy_chunk_bytes) == 216 &&
              offsetof(HelloReply, managed_devices) == kHelloReplyBytesV1_2 &&
              offsetof(HelloReply, daemon_clock_ns) == kHelloReplyBytesV1_3 &&
              offsetof(HelloReply, managed_uuid_count) == kHelloReplyBytesV1_7);
static_assert(sizeof(KernelNameHeader) == 16);
static_assert(offsetof(Hello, priority) == 8 && offsetof(Hello, job_name) == 16);
static_assert(offsetof(HelloReply, status) == 8 && offsetof(HelloReply, segment_name) == 16);

// Shim -> daemon, once per device: the process runs the work of its device `ordinal` straight to
// the driver, unscheduled (neither [devices] ordinals nor uuids name it), so that gpuqosd can say
// which GPUs each job uses that it does not schedule. uuid: the device's (all zero: the driver
// cannot say).
struct UnscheduledDevice {
  std::uint32_t magic;  // kUnscheduledDeviceMagic
  std::uint32_t ordinal;  // < kMaxDevices
  std::uint8_t uuid[16];
};
static_assert(std::is_trivially_copyable_v<UnscheduledDevice> && sizeof(UnscheduledDevice) == 24);

// What a control client asks for.
enum class ControlKind : std::uint32_t { status = 1 };
enum class ControlStatus : std::uint32_t { ok = 0, version_mismatch = 1, unknown_kind = 2 };

struct ControlRequest {
  std::uint32_t magic;  // kControlRequestMagic
  std::uint16_t version_major;
  std::uint16_t version_minor;
  ControlKind kind;
  std::uint32_t reserved;
};

// Followed by text_bytes bytes of UTF-8 text (no NUL): ok: the answer (status: a JSON object);
// otherwise why the request was refused.
struct ControlReplyHeader {
  std::uint32_t magic;  // kControlReplyMagic
  std::uint16_t version_major;  // the daemon's
  std::uint16_t version_minor;
  ControlStatus status;
  std::uint32_t text_bytes;  // <= kMaxControlTextBytes
};
inline constexpr std::size_t kMaxControlTextBytes = kMaxControlRecordBytes - sizeof(ControlReplyHeader);

static_assert(std::is_trivially_copyable_v<ControlRequest> && sizeof(ControlRequest) == 16);
static_assert(std::is_trivially_copyable_v<ControlReplyHeader> && sizeof(ControlReplyHeader) == 16);
static_assert(offsetof(ControlRequest, kind) == 8 && offsetof(ControlReplyHeader, status) == 8);

struct KernelName {
  std::uint32_t kernel_id = 0;
  std::string name;
};

// A decoded Hello. When the client speaks another major version only magic and version are
// filled in: reply version_mismatch and close.
struct DecodedHello {
  Hello hello{};
  bool version_matches = false;
};

// A decoded ControlRequest. From another major version only magic and version are filled in:
// reply version_mismatch.
struct DecodedControlRequest {
  ControlRequest request{};
  bool version_matches = false;
};

struct ControlReply {
  ControlStatus status = ControlStatus::ok;
  std::uint16_t version_major = 0;  // the daemon's
  std::string text;
};

enum class RecordKind { hello, hello_reply, kernel_name, control_request, control_reply, unscheduled_device, unknown };

// Which record this is, from its magic.
RecordKind record_kind(std::span<const std::byte> record) noexcept;

// Builders (shim and daemon side). The job name must be valid (see sanitize_job_name).
// effective_priority, copy_chunk_bytes and managed_devices matter for an ok reply only (pass low, 0
// and kAllDevices otherwise). A reply carries the caller's CLOCK_MONOTONIC (daemon_clock_ns), or
// clock_offset_ns past it (for tests: a daemon in another time namespace).
Result<Hello> make_hello(Priority priority, std::uint32_t device, std::string_view job_name);
HelloReply make_hello_reply(HelloStatus status, std::uint32_t client_number, std::string_view segment_name,
                            std::string_view message, Priority effective_priority, std::uint64_t copy_chunk_bytes,
                            std::uint64_t managed_devices = kAllDevices, std::int64_t clock_offset_ns = 0);

// A device UUID's text as nvidia-smi writes it after "GPU-" (lowercase, 8-4-4-4-12):
// "5053021f-f19c-8f3e-af75-ba138af7d608". What managed_uuids' prefixes are matched against.
std::string uuid_hex(std::span<const std::uint8_t, 16> uuid);

// An ok reply's managed_uuids (1.8): at most kMaxManagedUuids UUID prefixes as managed_uuids holds
// them; an error for more, or one that is not 1 to kUuidTextBytes lowercase hex digits and dashes.
Status set_managed_uuids(HelloReply& reply, std::span<const std::string> prefixes);
// The reply's managed_uuids (empty from a daemon older than 1.8).
std::vector<std::string> managed_uuids(const HelloReply& reply);

// Turns any string into a job name of the rule GPUQOS_JOB and [[job]] names follow (A-Z a-z 0-9 . _ -):
// other bytes become '_', cut to 63 bytes, "job" if empty. gpuqosd applies it to every Hello's name.
std::string sanitize_job_name(std::string_view name);

// A kernel name as KernelName records carry it: printable ASCII. Each byte outside it, and '\\', is
// written \xHH, so distinct names stay distinct (C++ allows UTF-8 identifiers, and a mangled name
// keeps them); cut to kMaxKernelNameBytes. The shim names kernels this way, in its records and its
// profiles alike, so what gpuqosd learns from one matches the other.
std::string wire_kernel_name(std::string_view name);

std::vector<std::byte> encode(const Hello& hello);
std::vector<std::byte> encode(const HelloReply& reply);
Result<std::vector<std::byte>> encode_kernel_name(std::uint32_t kernel_id, std::string_view name);
std::vector<std::byte> encode_unscheduled_device(std::uint32_t ordinal, std::span<const std::uint8_t, 16> uuid);
std::vector<std::byte> encode_control_request(ControlKind kind);
// Text longer than kMaxControlTextBytes is an error (the daemon bounds what it sends).
Result<std::vector<std::byte>> encode_control_reply(ControlStatus status, std::string_view text);

// Decoders: the one place where records from the other process are checked.
Result<DecodedHello> decode_hello(std::span<const std::byte> record);
Result<HelloReply> decode_hello_reply(std::span<const std::byte> record);
Result<KernelName> decode_kernel_name(std::span<const std::byte> record);
Result<UnscheduledDevice> decode_unscheduled_device(std::span<const std::byte> record);
Result<DecodedControlRequest> decode_control_request(std::span<const std::byte> record);
Result<ControlReply> decode_control_reply(std::span<const std::byte> record);

// Why connecting to gpuqosd's socket at `path` failed with errno `error`, for a user:
// "connect: Connection refused (... is not a socket: ...)". The errno alone misleads (a regular
// file or a directory there also reads "Connection refused").
// EAGAIN (a daemon whose queue of connections not yet accepted is full: stopped, or flooded) says
// kConnectQueueFull in its text.
std::string connect_failure(const std::string& path, int error);
inline constexpr const char* kConnectQueueFull = "gpuqosd's queue of new connections";

// Sends one record (MSG_NOSIGNAL, EINTR retried).
Status send_record(int fd, std::span<const std::byte> record);

// Receives one record into buffer (resized to what arrived). A record longer than
// kMaxRecordBytes (max_bytes) is an error, as is end of stream ("peer closed"). Blocking follows
// the socket.
Status receive_record(int fd, std::vector<std::byte>& buffer);
Status receive_record(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes);

// The same with one descriptor passed along (SCM_RIGHTS; the peer gets its own, close-on-exec).
// Received: the first descriptor that came, or -1; the caller owns it (also when the record itself
// is an error), and any more that came are closed. One the kernel could not pass (MSG_CTRUNC: the
// receiver's descriptor limit) is an error: the sender counts on it.
Status send_record(int fd, std::span<const std::byte> record, int passed_fd);
Status receive_record(int fd, std::vector<std::byte>& buffer, int& received_fd);
Status receive_record(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes, int* received_fd);

// The same with 1 to kMaxPassedDescriptors descriptors passed along, in order. Received: every one
// that came, in order; the caller owns them all (also when the record itself is an error).
inline constexpr std::size_t kMaxPassedDescriptors = 4;
Status send_record(int fd, std::span<const std::byte> record, std::span<const int> passed_fds);
Status receive_record(int fd, std::vector<std::byte>& buffer, std::vector<int>& received_fds);
Status receive_record(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes, std::vector<int>* received_fds);

// The peer of a connected Unix socket, as the kernel saw it when it connected (SO_PEERCRED).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
Result<PeerCredentials> peer_credentials(int fd);

}  // namespace gpuqos::ipc
