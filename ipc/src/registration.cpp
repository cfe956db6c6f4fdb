// Registration records: builders, encoders, the validating decoders, record I/O and SO_PEERCRED.
#include "gpuqos/ipc/registration.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/ipc/segment.h"

namespace gpuqos::ipc {
namespace {

using Record = std::span<const std::byte>;

// The prefix every versioned record starts with.
struct VersionPrefix {
  std::uint32_t magic;
  std::uint16_t version_major;
  std::uint16_t version_minor;
};
static_assert(offsetof(Hello, priority) == sizeof(VersionPrefix) && offsetof(HelloReply, status) == sizeof(VersionPrefix));

template <class T>
T read_prefix(Record record, std::size_t bytes) {
  T value{};
  std::memcpy(&value, record.data(), std::min(bytes, sizeof(T)));
  return value;
}

bool printable(char c) { return c >= 0x20 && c <= 0x7e; }

// A NUL-terminated, printable field of `capacity` bytes holding at least min_length characters.
Status check_text_field(const char* what, const char* field, std::size_t capacity, std::size_t min_length) {
  const char* end = static_cast<const char*>(std::memchr(field, '\0', capacity));
  if (end == nullptr) return Error{std::string(what) + " is not NUL-terminated"};
  std::size_t length = static_cast<std::size_t>(end - field);
  if (length < min_length) return Error{std::string(what) + " is empty"};
  if (!std::all_of(field, end, printable)) return Error{std::string(what) + " holds a non-printable byte"};
  return {};
}

// The record's size for the version it declares: exact for ours and older minors; a newer minor
// may append fields we ignore.
Status check_record_size(const char* what, std::size_t got, std::size_t want, std::uint16_t minor) {
  if (got < want || (got > want && minor <= kProtocolVersionMinor)) {
    return Error{std::string(what) + ": " + std::to_string(got) + " bytes, expected " + std::to_string(want)};
  }
  return {};
}

// The start of a UUID's text past "GPU-": 1 to kUuidTextBytes lowercase hex digits, with dashes where
// the 8-4-4-4-12 layout has them.
bool uuid_prefix_text(std::string_view text) {
  constexpr std::string_view kLayout = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  static_assert(kLayout.size() == kUuidTextBytes);
  if (text.empty() || text.size() > kUuidTextBytes) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (kLayout[i] == '-' ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

template <std::size_t N>
void copy_text(char (&field)[N], std::string_view text) {
  std::size_t bytes = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), bytes);
  field[bytes] = '\0';
}

template <class T>
std::vector<std::byte> bytes_of(const T& value) {
  const auto* begin = reinterpret_cast<const std::byte*>(&value);
  return std::vector<std::byte>(begin, begin + sizeof(T));
}

}  // namespace

RecordKind record_kind(Record record) noexcept {
  if (record.size() < sizeof(std::uint32_t)) return RecordKind::unknown;
  switch (read_prefix<std::uint32_t>(record, sizeof(std::uint32_t))) {
    case kHelloMagic: return RecordKind::hello;
    case kHelloReplyMagic: return RecordKind::hello_reply;
    case kKernelNameMagic: return RecordKind::kernel_name;
    case kControlRequestMagic: return RecordKind::control_request;
    case kControlReplyMagic: return RecordKind::control_reply;
    case kUnscheduledDeviceMagic: return RecordKind::unscheduled_device;
    default: return RecordKind::unknown;
  }
}

std::string sanitize_job_name(std::string_view name) {
  const auto job_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  };
  std::string clean(name.substr(0, kJobNameBytes - 1));
  std::replace_if(clean.begin(), clean.end(), [&](char c) { return !job_char(c); }, '_');
  return clean.empty() ? std::string("job") : clean;
}

Result<Hello> make_hello(Priority priority, std::uint32_t device, std::string_view job_name) {
  Hello hello{};
  hello.magic = kHelloMagic;
  hello.version_major = kProtocolVersionMajor;
  hello.version_minor = kProtocolVersionMinor;
  hello.priority = priority;
  hello.device = device;
  if (job_name.size() >= kJobNameBytes) return Error{"job name longer than 63 bytes"};
  if (job_name.find('\0') != std::string_view::npos) return Error{"job name holds a NUL byte"};
  copy_text(hello.job_name, job_name);
  if (Status valid = check_text_field("job name", hello.job_name, kJobNameBytes, 1); !valid) return Error{valid.error()};
  return hello;
}

HelloReply make_hello_reply(HelloStatus status, std::uint32_t client_number, std::string_view segment_name,
                            std::string_view message, Priority effective_priority, std::uint64_t copy_chunk_bytes,
                            std::uint64_t managed_devices, std::int64_t clock_offset_ns) {
  HelloReply reply{};
  reply.magic = kHelloReplyMagic;
  reply.version_major = kProtocolVersionMajor;
  reply.version_minor = kProtocolVersionMinor;
  reply.status = status;
  reply.client_number = client_number;
  copy_text(reply.segment_name, segment_name);
  copy_text(reply.message, message);
  std::replace_if(std::begin(reply.message), std::end(reply.message), [](char c) { return c != '\0' && !printable(c); }, '_');
  reply.effective_priority = effective_priority;
  reply.copy_chunk_bytes = copy_chunk_bytes;
  reply.managed_devices = managed_devices;
  reply.daemon_clock_ns = monotonic_ns() + clock_offset_ns;
  return reply;
}

std::vector<std::byte> encode(const Hello& hello) { return bytes_of(hello); }
std::vector<std::byte> encode(const HelloReply& reply) { return bytes_of(reply); }

std::string wire_kernel_name(std::string_view name) {
  std::string out;
  out.reserve(std::min<std::size_t>(name.size(), kMaxKernelNameBytes));
  for (const char c : name) {
    if (printable(c) && c != '\\') {
      out += c;
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      const auto byte = static_cast<unsigned char>(c);
      out += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
    }
    if (out.size() >= kMaxKernelNameBytes) break;
  }
  out.resize(std::min<std::size_t>(out.size(), kMaxKernelNameBytes));
  return out;
}

Result<std::vector<std::byte>> encode_kernel_name(std::uint32_t kernel_id, std::string_view name) {
  if (kernel_id == 0) return Error{"kernel id 0 is reserved"};
  if (name.empty() || name.size() > kMaxKernelNameBytes) return Error{"kernel name must be 1..4096 bytes"};
  KernelNameHeader header{kKernelNameMagic, kernel_id, static_cast<std::uint32_t>(name.size()), 0};
  std::vector<std::byte> record = bytes_of(header);
  const auto* text = reinterpret_cast<const std::byte*>(name.data());
  record.insert(record.end(), text, text + name.size());
  return record;
}

std::vector<std::byte> encode_unscheduled_device(std::uint32_t ordinal, std::span<const std::uint8_t, 16> uuid) {
  UnscheduledDevice device{kUnscheduledDeviceMagic, ordinal, {}};
  std::copy(uuid.begin(), uuid.end(), device.uuid);
  return bytes_of(device);
}

std::vector<std::byte> encode_control_request(ControlKind kind) {
  return bytes_of(ControlRequest{kControlRequestMagic, kProtocolVersionMajor, kProtocolVersionMinor, kind, 0});
}

Result<std::vector<std::byte>> encode_control_reply(ControlStatus status, std::string_view text) {
  if (text.size() > kMaxControlTextBytes) return Error{"control reply text of " + std::to_string(text.size()) + " bytes is too long"};
  ControlReplyHeader header{kControlReplyMagic, kProtocolVersionMajor, kProtocolVersionMinor, status,
                            static_cast<std::uint32_t>(text.size())};
  std::vector<std::byte> record = bytes_of(header);
  const auto* bytes = reinterpret_cast<const std::byte*>(text.data());
  record.insert(record.end(), bytes, bytes + text.size());
  return record;
}

Result<DecodedControlRequest> decode_control_request(Record record) {
  if (record.size() < sizeof(VersionPrefix)) return Error{"control request: " + std::to_string(record.size()) + " bytes, too short"};
  auto prefix = read_prefix<VersionPrefix>(record, sizeof(VersionPrefix));
  if (prefix.magic != kControlRequestMagic) return Error{"control request: bad magic"};
  DecodedControlRequest decoded;
  decoded.request.magic = prefix.magic;
  decoded.request.version_major = prefix.version_major;
  decoded.request.version_minor = prefix.version_minor;
  if (prefix.version_major != kProtocolVersionMajor) return decoded;
  if (Status size = check_record_size("control request", record.size(), sizeof(ControlRequest), prefix.version_minor); !size) {
    return Error{size.error()};
  }
  decoded.request = read_prefix<ControlRequest>(record, sizeof(ControlRequest));
  decoded.version_matches = true;
  return decoded;  // an unknown kind is answered with unknown_kind, not dropped
}

Result<ControlReply> decode_control_reply(Record record) {
  if (record.size() < sizeof(ControlReplyHeader)) return Error{"control reply: " + std::to_string(record.size()) + " bytes, too short"};
  auto header = read_prefix<ControlReplyHeader>(record, sizeof(ControlReplyHeader));
  if (header.magic != kControlReplyMagic) return Error{"control reply: bad magic"};
  ControlReply reply;
  reply.version_major = header.version_major;
  if (header.version_major != kProtocolVersionMajor) {
    reply.status = ControlStatus::version_mismatch;
    reply.text = "the daemon speaks protocol " + std::to_string(header.version_major) + "." +
                 std::to_string(header.version_minor);
    return reply;
  }
  if (static_cast<std::uint32_t>(header.status) > static_cast<std::uint32_t>(ControlStatus::unknown_kind)) {
    return Error{"control reply: unknown status " + std::to_string(static_cast<std::uint32_t>(header.status))};
  }
  if (header.text_bytes > kMaxControlTextBytes || record.size() != sizeof header + header.text_bytes) {
    return Error{"control reply: record of " + std::to_string(record.size()) + " bytes does not hold " +
                 std::to_string(header.text_bytes) + " bytes of text"};
  }
  reply.status = header.status;
  reply.text.assign(reinterpret_cast<const char*>(record.data() + sizeof header), header.text_bytes);
  return reply;
}

Result<DecodedHello> decode_hello(Record record) {
  if (record.size() < sizeof(VersionPrefix)) return Error{"hello: " + std::to_string(record.size()) + " bytes, too short"};
  auto prefix = read_prefix<VersionPrefix>(record, sizeof(VersionPrefix));
  if (prefix.magic != kHelloMagic) return Error{"hello: bad magic"};
  DecodedHello decoded;
  decoded.hello.magic = prefix.magic;
  decoded.hello.version_major = prefix.version_major;
  decoded.hello.version_minor = prefix.version_minor;
  if (prefix.version_major != kProtocolVersionMajor) return decoded;  // refused politely by the daemon
  if (Status size = check_record_size("hello", record.size(), sizeof(Hello), prefix.version_minor); !size) {
    return Error{size.error()};
  }
  const Hello hello = read_prefix<Hello>(record, sizeof(Hello));
  if (static_cast<std::uint8_t>(hello.priority) > static_cast<std::uint8_t>(Priority::high)) {
    return Error{"hello: priority " + std::to_string(static_cast<unsigned>(hello.priority)) + " is neither low nor high"};
  }
  if (hello.device >= kMaxDevices) return Error{"hello: device " + std::to_string(hello.device) + " out of range"};
  if (Status name = check_text_field("hello: job name", hello.job_name, kJobNameBytes, 1); !name) {
    return Error{name.error()};
  }
  decoded.hello = hello;
  decoded.version_matches = true;
  return decoded;
}

Result<HelloReply> decode_hello_reply(Record record) {
  constexpr std::size_t kStatusEnd = offsetof(HelloReply, client_number);
  if (record.size() < kStatusEnd) return Error{"hello reply: " + std::to_string(record.size()) + " bytes, too short"};
  auto reply = read_prefix<HelloReply>(record, kStatusEnd);
  if (reply.magic != kHelloReplyMagic) return Error{"hello reply: bad magic"};
  if (reply.version_major != kProtocolVersionMajor) {
    reply.status = HelloStatus::version_mismatch;  // whatever it said: we cannot read the rest
    return reply;
  }
  // A 1.0 daemon's reply ends after the message, a 1.1 or 1.2 one after copy_chunk_bytes, a 1.3 one
  // after managed_devices: the later fields stay zero (the shim checks the minor).
  const std::size_t want = reply.version_minor == 0   ? kHelloReplyBytesV1_0
                           : reply.version_minor <= 2 ? kHelloReplyBytesV1_2
                           : reply.version_minor == 3 ? kHelloReplyBytesV1_3
                           : reply.version_minor <= 7 ? kHelloReplyBytesV1_7
                                                      : sizeof(HelloReply);
  if (Status size = check_record_size("hello reply", record.size(), want, reply.version_minor); !size) {
    return Error{size.error()};
  }
  reply = read_prefix<HelloReply>(record, want);
  if (static_cast<std::uint32_t>(reply.status) > static_cast<std::uint32_t>(HelloStatus::refused)) {
    return Error{"hello reply: unknown status " + std::to_string(static_cast<std::uint32_t>(reply.status))};
  }
  if (static_cast<std::uint8_t>(reply.effective_priority) > static_cast<std::uint8_t>(Priority::high)) {
    return Error{"hello reply: priority " + std::to_string(static_cast<unsigned>(reply.effective_priority)) +
                 " is neither low nor high"};
  }
  if (Status text = check_text_field("hello reply: message", reply.message, kReplyMessageBytes, 0); !text) {
    return Error{text.error()};
  }
  if (reply.status == HelloStatus::ok) {
    if (Status name = check_text_field("hello reply: segment name", reply.segment_name, kSegmentNameBytes, 1); !name) {
      return Error{name.error()};
    }
    if (Status name = check_segment_name(reply.segment_name); !name) return Error{"hello reply: " + name.error()};
    if (reply.managed_uuid_count > kMaxManagedUuids) {
      return Error{"hello reply: " + std::to_string(reply.managed_uuid_count) + " managed UUIDs, more than " +
                   std::to_string(kMaxManagedUuids)};
    }
    for (std::uint32_t i = 0; i < reply.managed_uuid_count; ++i) {
      const char* entry = reply.managed_uuids[i];
      const std::string_view text(entry, strnlen(entry, sizeof reply.managed_uuids[i]));
      if (text.size() == sizeof reply.managed_uuids[i] || !uuid_prefix_text(text)) {
        return Error{"hello reply: managed UUID " + std::to_string(i) + " is not a UUID's start"};
      }
    }
  } else {
    reply.managed_uuid_count = 0;
  }
  return reply;
}

Status set_managed_uuids(HelloReply& reply, std::span<const std::string> prefixes) {
  if (prefixes.size() > kMaxManagedUuids) {
    return Error{std::to_string(prefixes.size()) + " managed UUIDs, more than " + std::to_string(kMaxManagedUuids)};
  }
  for (std::size_t i = 0; i < prefixes.size(); ++i) {
    if (!uuid_prefix_text(prefixes[i])) return Error{"managed UUID '" + prefixes[i] + "' is not a UUID's start"};
    copy_text(reply.managed_uuids[i], prefixes[i]);
  }
  reply.managed_uuid_count = static_cast<std::uint32_t>(prefixes.size());
  return {};
}

std::vector<std::string> managed_uuids(const HelloReply& reply) {
  std::vector<std::string> out;
  const std::uint32_t count = reply.version_minor >= 8 ? std::min(reply.managed_uuid_count, kMaxManagedUuids) : 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    out.emplace_back(reply.managed_uuids[i], strnlen(reply.managed_uuids[i], sizeof reply.managed_uuids[i]));
  }
  return out;
}

Result<KernelName> decode_kernel_name(Record record) {
  if (record.size() < sizeof(KernelNameHeader)) return Error{"kernel name: record too short"};
  auto header = read_prefix<KernelNameHeader>(record, sizeof(KernelNameHeader));
  if (header.magic != kKernelNameMagic) return Error{"kernel name: bad magic"};
  if (header.kernel_id == 0) return Error{"kernel name: kernel id 0 is reserved"};
  if (header.name_bytes == 0 || header.name_bytes > kMaxKernelNameBytes) {
    return Error{"kernel name: length " + std::to_string(header.name_bytes) + " not in 1..4096"};
  }
  if (record.size() != sizeof header + header.name_bytes) {
    return Error{"kernel name: record of " + std::to_string(record.size()) + " bytes, expected " +
                 std::to_string(sizeof header + header.name_bytes)};
  }
  KernelName decoded;
  decoded.kernel_id = header.kernel_id;
  decoded.name.assign(reinterpret_cast<const char*>(record.data() + sizeof header), header.name_bytes);
  if (!std::all_of(decoded.name.begin(), decoded.name.end(), printable)) {
    return Error{"kernel name: holds a non-printable byte"};
  }
  return decoded;
}

Result<UnscheduledDevice> decode_unscheduled_device(Record record) {
  if (record.size() != sizeof(UnscheduledDevice)) {
    return Error{"unscheduled device: record of " + std::to_string(record.size()) + " bytes, expected " +
                 std::to_string(sizeof(UnscheduledDevice))};
  }
  auto device = read_prefix<UnscheduledDevice>(record, sizeof(UnscheduledDevice));
  if (device.magic != kUnscheduledDeviceMagic) return Error{"unscheduled device: bad magic"};
  if (device.ordinal >= kMaxDevices) {
    return Error{"unscheduled device: ordinal " + std::to_string(device.ordinal) + " not under " +
                 std::to_string(kMaxDevices)};
  }
  return device;
}

std::string uuid_hex(std::span<const std::uint8_t, 16> u) {
  char text[kUuidTextBytes + 1];
  std::snprintf(text, sizeof text, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return text;
}

std::string connect_failure(const std::string& path, int error) {
  std::string hint;
  struct stat info{};
  const bool exists = ::lstat(path.c_str(), &info) == 0;
  if (error == ENOENT || (error == ECONNREFUSED && !exists)) {
    hint = "nothing at " + path + ": is gpuqosd running, with this socket path?";
  } else if (error == ECONNREFUSED && !S_ISSOCK(info.st_mode)) {
    hint = path + (S_ISDIR(info.st_mode) ? " is a directory" : " exists and is not a socket") +
           ": not gpuqosd's socket (its path is [daemon] socket, or gpuqosd --socket)";
  } else if (error == ECONNREFUSED) {
    hint = "no gpuqosd serves " + path + ": a socket left by one that died?";
  } else if (error == EACCES) {
    hint = "this user may not open " + path + " or a directory above it";
  } else if (error == EAGAIN) {
    hint = std::string(kConnectQueueFull) + " at " + path + " is full: it is stopped, or too busy to accept";
  }
  return std::string("connect: ") + std::strerror(error) + (hint.empty() ? "" : " (" + hint + ")");
}

Status send_record(int fd, std::span<const std::byte> record) {
  for (;;) {
    ssize_t sent = ::send(fd, record.data(), record.size(), MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(record.size())) return {};
    if (sent < 0 && errno == EINTR) continue;
    return Error{sent < 0 ? std::string("send: ") + std::strerror(errno) : std::string("send: short write")};
  }
}

Status send_record(int fd, std::span<const std::byte> record, int passed_fd) {
  return send_record(fd, record, std::span<const int>(&passed_fd, 1));
}

Status send_record(int fd, std::span<const std::byte> record, std::span<const int> passed_fds) {
  if (passed_fds.empty() || passed_fds.size() > kMaxPassedDescriptors) {
    return Error{"sendmsg: " + std::to_string(passed_fds.size()) + " descriptors (1 to " +
                 std::to_string(kMaxPassedDescriptors) + " pass with a record)"};
  }
  iovec io{const_cast<std::byte*>(record.data()), record.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxPassedDescriptors * sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = CMSG_SPACE(passed_fds.size() * sizeof(int));
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(passed_fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(header), passed_fds.data(), passed_fds.size() * sizeof(int));
  for (;;) {
    const ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(record.size())) return {};
    if (sent < 0 && errno == EINTR) continue;
    return Error{sent < 0 ? std::string("sendmsg: ") + std::strerror(errno) : std::string("sendmsg: short write")};
  }
}

Status receive_record(int fd, std::vector<std::byte>& buffer) { return receive_record(fd, buffer, kMaxRecordBytes); }

Status receive_record(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes) {
  return receive_record(fd, buffer, max_bytes, static_cast<std::vector<int>*>(nullptr));
}

Status receive_record(int fd, std::vector<std::byte>& buffer, int& received_fd) {
  return receive_record(fd, buffer, kMaxRecordBytes, &received_fd);
}

Status receive_record(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes, int* received_fd) {
  std::vector<int> received;
  Status status = receive_record(fd, buffer, max_bytes, received_fd ? &received : nullptr);
  if (received_fd) *received_fd = received.empty() ? -1 : received.front();
  for (std::size_t i = 1; i < received.size(); ++i) ::close(received[i]);
  return status;
}

Status receive_record(int fd, std::vector<std::byte>& buffer, std::vector<int>& received_fds) {
  return receive_record(fd, buffer, kMaxRecordBytes, &received_fds);
}

Status receive_record(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes, std::vector<int>* received_fds) {
  if (received_fds) received_fds->clear();
  buffer.resize(max_bytes);
  iovec io{buffer.data(), buffer.size()};
  // Room for more descriptors than any record passes, so that a peer passing more than expected is
  // seen (and its extra ones closed by the caller) rather than cut short.
  alignas(cmsghdr) char control[CMSG_SPACE(2 * kMaxPassedDescriptors * sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  if (received_fds) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
  }
  ssize_t got;
  do {
    got = ::recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    buffer.clear();
    return Error{std::string("recv: ") + std::strerror(errno)};
  }
  if (received_fds) {  // before any return: every descriptor that came is the caller's to keep or close
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
      if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int passed = -1;
        std::memcpy(&passed, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
        received_fds->push_back(passed);
      }
    }
  }
  if (got == 0) {
    buffer.clear();
    return Error{"peer closed"};
  }
  if (received_fds && (message.msg_flags & MSG_CTRUNC)) {  // a descriptor sent was lost (our limit)
    buffer.clear();
    return Error{"a descriptor sent with the record was lost (the process's descriptor limit?)"};
  }
  if (message.msg_flags & MSG_TRUNC) {
    buffer.clear();
    return Error{"record longer than " + std::to_string(max_bytes) + " bytes"};
  }
  buffer.resize(static_cast<std::size_t>(got));
  return {};
}

Result<PeerCredentials> peer_credentials(int fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0 || length != sizeof credentials) {
    return Error{std::string("SO_PEERCRED: ") + std::strerror(errno)};
  }
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
}

}  // namespace gpuqos::ipc
