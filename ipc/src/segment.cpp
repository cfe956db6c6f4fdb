// Segment::create (daemon) and Segment::open (shim): Boost.Interprocess mapping plus the header
// checks that make a client refuse a segment it does not understand.
#include "gpuqos/ipc/segment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <optional>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include <boost/interprocess/shared_memory_object.hpp>

#include "gpuqos/ipc/clock.h"

namespace gpuqos::ipc {
namespace bip = boost::interprocess;
namespace {

constexpr unsigned kSegmentMode = 0600;

SegmentHeader expected_header() {
  SegmentHeader header{};
  header.magic = kSegmentMagic;
  header.version_major = kSegmentVersionMajor;
  header.version_minor = kSegmentVersionMinor;
  header.total_bytes = kSegmentBytes;
  header.ops_ring_offset = kOpsRingOffset;
  header.completions_ring_offset = kCompletionsRingOffset;
  header.grants_ring_offset = kGrantsRingOffset;
  header.ops_ring_capacity = kOpsRingCapacity;
  header.completions_ring_capacity = kCompletionsRingCapacity;
  header.grants_ring_capacity = kGrantsRingCapacity;
  header.op_descriptor_bytes = sizeof(OpDescriptor);
  header.completion_descriptor_bytes = sizeof(CompletionDescriptor);
  header.grant_descriptor_bytes = sizeof(GrantDescriptor);
  return header;
}

std::string hex(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

// The checks open() makes before it touches anything past the header.
Status check_header(const SegmentHeader& got, std::uint64_t mapped_bytes) {
  const SegmentHeader want = expected_header();
  if (got.magic != want.magic) return Error{"bad magic " + hex(got.magic) + " (not a gpuqos segment)"};
  if (got.version_major != want.version_major) {
    return Error{"segment version " + std::to_string(got.version_major) + "." + std::to_string(got.version_minor) +
                 " but this library speaks " + std::to_string(want.version_major) + "." +
                 std::to_string(want.version_minor) + " (daemon and libgpuqos.so are from different releases)"};
  }
  if (got.total_bytes > mapped_bytes) {
    return Error{"segment is " + std::to_string(mapped_bytes) + " bytes but its header says " +
                 std::to_string(got.total_bytes) + " (truncated)"};
  }
  bool same_layout = got.total_bytes == want.total_bytes && got.ops_ring_offset == want.ops_ring_offset &&
                     got.completions_ring_offset == want.completions_ring_offset &&
                     got.grants_ring_offset == want.grants_ring_offset &&
                     got.ops_ring_capacity == want.ops_ring_capacity &&
                     got.completions_ring_capacity == want.completions_ring_capacity &&
                     got.grants_ring_capacity == want.grants_ring_capacity &&
                     got.op_descriptor_bytes == want.op_descriptor_bytes &&
                     got.completion_descriptor_bytes == want.completion_descriptor_bytes &&
                     got.grant_descriptor_bytes == want.grant_descriptor_bytes;
  if (!same_layout) return Error{"segment layout differs from this library's at the same major version"};
  return {};
}

// Gives the segment to the client's user when the daemon is another user (root).
Status hand_to_client(const bip::shared_memory_object& shm, std::uint32_t client_uid) {
  const int fd = shm.get_mapping_handle().handle;
  if (::fchmod(fd, kSegmentMode) != 0) return Error{std::string("fchmod: ") + std::strerror(errno)};
  if (::geteuid() == client_uid) return {};
  if (::fchown(fd, client_uid, static_cast<gid_t>(-1)) != 0) {
    return Error{"fchown to uid " + std::to_string(client_uid) + ": " + std::strerror(errno) +
                 " (a daemon serving other users must run as root)"};
  }
  return {};
}

void construct_layout(void* base, std::uint32_t client_uid, std::uint32_t client_pid) {
  auto* bytes = static_cast<std::byte*>(base);
  new (bytes + kOpsRingOffset) OpsRing();
  new (bytes + kCompletionsRingOffset) CompletionsRing();
  new (bytes + kGrantsRingOffset) GrantsRing();
  SegmentHeader header = expected_header();
  header.client_pid = client_pid;
  header.client_uid = client_uid;
  header.daemon_pid = static_cast<std::uint32_t>(::getpid());
  header.daemon_heartbeat_ns = static_cast<std::uint64_t>(monotonic_ns());
  std::memcpy(base, &header, sizeof header);
}

// Reserves the segment's pages now: a segment only truncated is sparse, and /dev/shm (tmpfs) gives
// each page at its first write. A full /dev/shm (a container's 64 MiB, filled by a data loader) then
// killed the writer with SIGBUS: gpuqosd here, or a job's shim at its first use of a ring slot. A
// memfd takes its pages from the same shmem. tmpfs's fallocate stops with EINTR at a signal (a stop
// of gpuqosd): tried again, not refused.
Status reserve_pages(int fd, const std::string& name) {
  int error = 0;
  while ((error = ::posix_fallocate(fd, 0, static_cast<off_t>(kSegmentBytes))) == EINTR) {
  }
  if (error == 0) return {};
  return Error{"cannot reserve the " + std::to_string(kSegmentBytes / 1024) + " KiB of segment " + name +
               " in shared memory: " + std::strerror(error)};
}

// A descriptor as Boost.Interprocess maps it: mapped_region takes any class that gives a mapping
// handle, and shared_memory_object and file_mapping only open theirs by name (a memfd has none).
struct PassedDescriptor {
  int fd;
  bip::mapping_handle_t get_mapping_handle() const noexcept { return bip::ipcdetail::mapping_handle_from_file_handle(fd); }
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

}  // namespace

std::string segment_name(std::uint32_t daemon_pid, std::uint32_t client_number, std::uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
  return "/gpuqos-" + std::to_string(daemon_pid) + "-" + std::to_string(client_number) + "-" + hex;
}

namespace {

// The daemon pid in a name segment_name() makes ("gpuqos-<pid>-<number>-<nonce>", no '/'; before
// 2026-11-28 without "-<nonce>"), or nothing.
std::optional<std::uint32_t> daemon_pid_of(std::string_view file) {
  constexpr std::string_view kPrefix = "gpuqos-";
  if (!file.starts_with(kPrefix)) return std::nullopt;
  file.remove_prefix(kPrefix.size());
  const auto dash = file.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == file.size()) return std::nullopt;
  const auto all_of = [](std::string_view text, std::string_view chars) {
    return !text.empty() && text.find_first_not_of(chars) == std::string_view::npos;
  };
  std::string_view number = file.substr(dash + 1);
  if (const auto nonce = number.find('-'); nonce != std::string_view::npos) {
    if (!all_of(number.substr(nonce + 1), "0123456789abcdef")) return std::nullopt;
    number = number.substr(0, nonce);
  }
  if (!all_of(number, "0123456789")) return std::nullopt;
  std::uint32_t pid = 0;
  const auto [end, error] = std::from_chars(file.data(), file.data() + dash, pid);
  if (error != std::errc{} || end != file.data() + dash || pid == 0) return std::nullopt;
  return pid;
}

bool process_exists(std::uint32_t pid) {
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;  // EPERM: alive, another user's
}

}  // namespace

std::vector<std::string> remove_stale_segments(std::uint32_t self_pid) noexcept {
  std::vector<std::string> removed;
  try {
    std::error_code error;
    for (std::filesystem::directory_iterator it("/dev/shm", error), end; !error && it != end; it.increment(error)) {
      const std::string file = it->path().filename().string();
      const auto pid = daemon_pid_of(file);
      if (!pid || (*pid != self_pid && process_exists(*pid))) continue;
      if (Segment::remove("/" + file)) removed.push_back("/" + file);
    }
  } catch (...) {  // out of memory: what was removed so far is said
  }
  return removed;
}

Status check_segment_name(std::string_view name) {
  if (name.size() < 2 || name.size() >= kSegmentNameBytes) return Error{"segment name must be 2..63 bytes"};
  if (name.front() != '/') return Error{"segment name must start with '/'"};
  for (char c : name.substr(1)) {
    if (!is_name_char(c)) return Error{"segment name may only hold [A-Za-z0-9._-] after its '/'"};
  }
  return {};
}

Result<Segment> Segment::create(const std::string& name, std::uint32_t client_uid, std::uint32_t client_pid) {
  if (Status valid = check_segment_name(name); !valid) return Error{valid.error()};
  bool created = false;
  const auto fail = [&](const std::string& why) -> Result<Segment> {
    if (created) remove(name);
    return Error{why};
  };
  try {
    // Sized, mapped at its full size, guarded and laid out while it is still this user's, and only
    // then handed to the client: a client that truncated it during the set-up (a review's, watching
    // /dev/shm with inotify) made the mapping short, so the layout was written past it, or the
    // first write a SIGBUS before the guard was set, and gpuqosd died. Its own user (a gpuqosd that
    // is not root) can open it all along: the guard is set before the first write for that.
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, bip::permissions(kSegmentMode));
    created = true;
    shm.truncate(static_cast<bip::offset_t>(kSegmentBytes));
    if (Status reserved = reserve_pages(shm.get_mapping_handle().handle, name); !reserved) return fail(reserved.error());
    bip::mapped_region region(shm, bip::read_write, 0, kSegmentBytes);
    Segment segment(name, std::move(region), /*guard=*/true, /*named=*/true);
    // Its client may truncate it (a sealed one it cannot): unguarded, our next access would be a
    // SIGBUS, which a review reached past the guard's table with a few thousand clients.
    if (!segment.guard_.guarded()) {
      return fail("cannot create segment " + name + ": " + std::to_string(BusGuard::kMaxGuardedRanges) +
                  " segments its clients could truncate are mapped already, each guarded against SIGBUS");
    }
    construct_layout(segment.region_.get_address(), client_uid, client_pid);
    if (segment.guard_.faulted()) return fail("cannot create segment " + name + ": it was truncated while being set up");
    if (Status handed = hand_to_client(shm, client_uid); !handed) return fail("segment " + name + ": " + handed.error());
    return segment;
  } catch (const std::exception& e) {
    return fail("cannot create segment " + name + ": " + e.what());
  } catch (...) {
    return fail("cannot create segment " + name + ": unknown error");
  }
}

Result<Segment> Segment::create_sealed(const std::string& name, std::uint32_t client_uid, std::uint32_t client_pid) {
  if (Status valid = check_segment_name(name); !valid) return Error{valid.error()};
  const int fd = ::memfd_create(name.c_str() + 1, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Error{"cannot create segment " + name + ": memfd_create: " + std::strerror(errno)};
  const auto fail = [&](const std::string& why) -> Result<Segment> {
    ::close(fd);
    return Error{"cannot create segment " + name + ": " + why};
  };
  if (::ftruncate(fd, static_cast<off_t>(kSegmentBytes)) != 0) return fail(std::string("ftruncate: ") + std::strerror(errno));
  if (Status reserved = reserve_pages(fd, name); !reserved) {
    ::close(fd);
    return Error{reserved.error()};
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return fail(std::string("sealing its size: ") + std::strerror(errno));
  }
  try {
    bip::mapped_region region(PassedDescriptor{fd}, bip::read_write, 0, kSegmentBytes);
    Segment segment(name, std::move(region), /*guard=*/true, /*named=*/false);
    construct_layout(segment.region_.get_address(), client_uid, client_pid);
    segment.descriptor_ = fd;
    return segment;
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown error");
  }
}

// What a client maps: the name's segment or a passed one, kept when its header is one this build
// understands. `map` may throw; what it throws is said as "cannot <verb> segment NAME: ...".
template <class Map>
Result<Segment> Segment::map_client_side(const std::string& name, const char* verb, bool named, Map map) {
  try {
    auto region = map();
    if (!region) return Error{region.error()};
    SegmentHeader header;
    std::memcpy(&header, region->get_address(), sizeof header);
    if (Status usable = check_header(header, region->get_size()); !usable) {
      return Error{"refusing segment " + name + ": " + usable.error()};
    }
    return Segment(name, std::move(region.value()), /*guard=*/false, named);
  } catch (const std::exception& e) {
    return Error{std::string("cannot ") + verb + " segment " + name + ": " + e.what()};
  } catch (...) {
    return Error{std::string("cannot ") + verb + " segment " + name + ": unknown error"};
  }
}

Result<Segment> Segment::open(const std::string& name) {
  return map_client_side(name, "open", /*named=*/true, [&]() -> Result<bip::mapped_region> {
    if (Status valid = check_segment_name(name); !valid) return Error{valid.error()};
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!shm.get_size(size) || size < static_cast<bip::offset_t>(sizeof(SegmentHeader))) {
      return Error{"segment " + name + " is smaller than its header (" + std::to_string(size) + " bytes)"};
    }
    return bip::mapped_region(shm, bip::read_write);
  });
}

Result<Segment> Segment::open_passed(int fd, const std::string& name) {
  return map_client_side(name, "map", /*named=*/false, [&]() -> Result<bip::mapped_region> {
    struct stat file {};
    if (fd < 0 || ::fstat(fd, &file) != 0 || !S_ISREG(file.st_mode)) {
      return Error{"refusing segment " + name + ": the descriptor passed is not a shared memory file"};
    }
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
      return Error{"refusing segment " + name + ": its size is not sealed (it could be truncated under the mapping)"};
    }
    if (file.st_size < static_cast<off_t>(sizeof(SegmentHeader))) {
      return Error{"segment " + name + " is smaller than its header (" + std::to_string(file.st_size) + " bytes)"};
    }
    return bip::mapped_region(PassedDescriptor{fd}, bip::read_write, 0, static_cast<std::size_t>(file.st_size));
  });
}

Segment::~Segment() {
  if (descriptor_ >= 0) ::close(descriptor_);
}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    if (descriptor_ >= 0) ::close(descriptor_);
    guard_ = std::move(other.guard_);  // the guard goes before the region it covers is replaced
    region_ = std::move(other.region_);
    name_ = std::move(other.name_);
    descriptor_ = std::exchange(other.descriptor_, -1);
    named_ = std::exchange(other.named_, false);
  }
  return *this;
}

bool Segment::remove(const std::string& name) noexcept {
  try {
    return bip::shared_memory_object::remove(name.c_str());
  } catch (...) {
    return false;
  }
}

}  // namespace gpuqos::ipc
