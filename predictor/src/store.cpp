// The profile file: header, CRC-32, zlib body; atomic replacement on save.
#include "gpuqos/predictor/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "profile_json.h"

namespace gpuqos::predictor {

namespace {

constexpr char kMagic[8] = {'G', 'P', 'U', 'Q', 'O', 'S', 'P', 'F'};
constexpr std::size_t kHeaderBytes = 40;
// The largest store the default limits allow, max_kernels (4,096) names of max_samples_per_kernel
// (256) shapes, with every number at its longest (8 args of 20 digits, 10-digit dimensions, 17-digit
// floats) and names of 4 KiB, is 356 MB of JSON (one of 4,096 typical names: 84 MB). A body that
// inflates beyond 512 MiB is not a store, and is refused before its buffer is zero-filled (4 GiB
// was allowed: 1032 times a 4 MB file).
constexpr std::uint64_t kMaxJsonBytes = std::uint64_t{512} << 20;
// A store nests 6 deep (body, copies, classes, line, sizes, size).
constexpr int kMaxJsonDepth = 16;
// zlib inflates at most about 1032:1: a header claiming more is garbage (it is outside the CRC),
// and believing it would allocate the claim before inflating fails.
constexpr std::uint64_t kMaxInflation = 1032;
constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{1} << 30;  // a profile is a few MB

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t(static_cast<unsigned char>(in[at + std::size_t(i)])) << (8 * i);
  return value;
}

std::uint32_t crc_of(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::size_t at = 0; at < data.size();) {  // crc32 takes a uInt length
    const auto chunk = uInt(std::min<std::size_t>(data.size() - at, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + at), chunk);
    at += chunk;
  }
  return std::uint32_t(crc);
}

// The JSON text of a body, or an error.
std::string inflate_body(std::string_view body, std::uint64_t json_bytes, std::string& error) {
  if (json_bytes > kMaxJsonBytes) {
    error = "the header says " + std::to_string(json_bytes) + " bytes of JSON, more than a store can hold (" +
            std::to_string(kMaxJsonBytes) + ")";
    return "";
  }
  if (json_bytes > body.size() * kMaxInflation + 64) {
    error = "implausible body size " + std::to_string(json_bytes);
    return "";
  }
  std::string text(json_bytes, '\0');
  uLongf length = uLongf(json_bytes);
  const int rc = uncompress(reinterpret_cast<Bytef*>(text.data()), &length, reinterpret_cast<const Bytef*>(body.data()), uLong(body.size()));
  // The JSON length is outside the CRC: a body that inflates to another length than it says is
  // told as such, not as a zlib failure (a length one too large inflated fine: "zlib error 0").
  if (rc == Z_BUF_ERROR) {
    error = "the body inflates to more than the " + std::to_string(json_bytes) + " bytes of JSON the header says";
  } else if (rc != Z_OK) {
    error = "corrupt compressed body (zlib error " + std::to_string(rc) + ")";
  } else if (length != json_bytes) {
    error = "the header says " + std::to_string(json_bytes) + " bytes of JSON, the body inflates to " + std::to_string(length);
  }
  if (!error.empty()) return "";
  return text;
}

// What a body may hold for a loader of `config`, with room to spare: parse() builds the whole tree,
// 16 bytes or more a value, before anything is checked (a 261 KB file of 256 MiB of "[0,0,..."
// took 4.46 GB and 19 s in gpuqosd's start), so a body beyond what a store of the loader's own
// limits holds (it would be cut to them anyway) is refused while it is parsed.
struct JsonLimits {
  // Its kernels' samples (21 values each), windows and sums (~460 a kernel): 1.6 times the 23.9
  // million values of a full store at the default limits.
  std::uint64_t values;
  // The longest array or object of a store is its kernel list, a kernel's samples or a window (the
  // rest hold at most ~200): that file's single array took 1.5 GB and 8 s before the count of values
  // stopped it, 0.7 s and the inflated text's 267 MB with this.
  std::uint64_t elements;
};

JsonLimits json_limits(const PredictorConfig& config) {
  const std::uint64_t per_kernel = std::uint64_t{config.max_samples_per_kernel} * 32 + std::uint64_t{config.stats_window} * 4 + 1024;
  const std::uint64_t longest = std::max({config.max_kernels, config.max_samples_per_kernel, config.stats_window, 1024u});
  return {std::uint64_t{config.max_kernels} * per_kernel + (std::uint64_t{1} << 16), 2 * longest};
}

nlohmann::json parse_bounded(const std::string& text, const PredictorConfig& config) {
  using Event = nlohmann::json::parse_event_t;
  const JsonLimits limits = json_limits(config);
  std::uint64_t values = 0;
  std::array<std::uint64_t, kMaxJsonDepth + 2> elements{};  // of the array or object open at each depth
  return nlohmann::json::parse(text, [&](int depth, Event event, const nlohmann::json&) {
    if (depth > kMaxJsonDepth) throw detail::ProfileError("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (event != Event::value && event != Event::array_start && event != Event::object_start) return true;
    if (++values > limits.values) {
      throw detail::ProfileError("more than " + std::to_string(limits.values) + " JSON values, more than a store of max_kernels " +
                                 std::to_string(config.max_kernels) + " and max_samples_per_kernel " +
                                 std::to_string(config.max_samples_per_kernel) + " holds");
    }
    if (++elements[std::size_t(depth)] > limits.elements) {
      throw detail::ProfileError("an array or object of more than " + std::to_string(limits.elements) +
                                 " elements, more than any of a store holds");
    }
    if (event != Event::value) elements[std::size_t(depth) + 1] = 0;
    return true;
  });
}

// A store's memory bounds are the loader's to set (gpuqosd's memory, not the trainer's): a store
// that allows more is cut to the loader's limits, not refused, and what that drops is said once.
// Returns the warning, if anything was dropped.
std::optional<std::string> limit_to(Predictor::State& state, const PredictorConfig& loader, const std::string& source) {
  PredictorConfig& c = state.config;
  c.max_kernels = std::min(c.max_kernels, loader.max_kernels);
  c.max_samples_per_kernel = std::min(c.max_samples_per_kernel, loader.max_samples_per_kernel);
  c.stats_window = std::min(c.stats_window, loader.stats_window);
  const std::size_t names_over = state.kernels.size() > c.max_kernels ? state.kernels.size() - c.max_kernels : 0;
  std::size_t shapes_over = 0;
  for (std::size_t i = 0; i < state.kernels.size() - names_over; ++i) {
    const std::size_t shapes = state.kernels[i].second.samples.size();
    shapes_over += shapes > c.max_samples_per_kernel ? shapes - c.max_samples_per_kernel : 0;
  }
  if (names_over == 0 && shapes_over == 0) return std::nullopt;
  std::string dropped;
  if (names_over > 0) {
    dropped = std::to_string(names_over) + (names_over == 1 ? " kernel name" : " kernel names") + " beyond max_kernels (" +
              std::to_string(c.max_kernels) + ")";
  }
  if (shapes_over > 0) {
    dropped += (dropped.empty() ? "" : " and ") + std::to_string(shapes_over) + (shapes_over == 1 ? " shape" : " shapes") +
               " beyond max_samples_per_kernel (" + std::to_string(c.max_samples_per_kernel) + ")";
  }
  return source + ": dropped " + dropped + "; the rest of the store is loaded";
}

enum class Problem { content, access, missing };

LoadedProfile empty(const PredictorConfig& config, const std::string& source, const std::string& problem,
                    Problem kind = Problem::content) {
  return {Predictor(config), source + ": " + problem + "; starting with an empty model", kind == Problem::content,
          kind == Problem::access};
}

// Whether every number in `j` is finite; if not, `where` is the path of the first that is not.
bool all_finite(const nlohmann::json& j, std::string& where) {
  if (j.is_number_float()) return std::isfinite(j.get<double>());
  if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      if (!all_finite(j[i], where)) {
        where = "[" + std::to_string(i) + "]" + where;
        return false;
      }
    }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (!all_finite(value, where)) {
        where = "." + key + where;
        return false;
      }
    }
  }
  return true;
}

}  // namespace

std::string encode_profile(const Predictor::State& predictor_state) {
  const nlohmann::json state = detail::state_to_json(predictor_state);
  // nlohmann writes a NaN or an infinity as null, which no load accepts: a store saved so would
  // replace a good one with one that starts every later gpuqosd with an empty model.
  if (std::string where; !all_finite(state, where)) {
    throw std::runtime_error("not saved: " + where.substr(where.starts_with('.') ? 1 : 0) +
                             " is not a finite number (the model holds a fault; the file is left as it was)");
  }
  const std::string json_text = state.dump();
  uLongf compressed_bytes = compressBound(uLong(json_text.size()));
  std::string body(compressed_bytes, '\0');
  if (compress2(reinterpret_cast<Bytef*>(body.data()), &compressed_bytes, reinterpret_cast<const Bytef*>(json_text.data()),
                uLong(json_text.size()), 6) != Z_OK)
    throw std::runtime_error("zlib compress failed");
  body.resize(compressed_bytes);
  std::string out(kMagic, sizeof kMagic);
  put_le(out, kProfileFileVersion, 4);
  put_le(out, 0, 4);
  put_le(out, body.size(), 8);
  put_le(out, json_text.size(), 8);
  put_le(out, crc_of(body), 4);
  put_le(out, 0, 4);
  return out + body;
}

LoadedProfile decode_profile(std::string_view bytes, const std::string& source, const PredictorConfig& config) {
  if (bytes.size() < kHeaderBytes) return empty(config, source, "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the header");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return empty(config, source, "not a gpuqos predictor profile (bad magic)");
  const auto version = get_le(bytes, 8, 4);
  if (version != kProfileFileVersion)
    return empty(config, source, "unsupported profile version " + std::to_string(version) + " (this build reads 1)");
  if (get_le(bytes, 12, 4) != 0) return empty(config, source, "unsupported flags " + std::to_string(get_le(bytes, 12, 4)));
  const std::uint64_t body_bytes = get_le(bytes, 16, 8);
  if (bytes.size() - kHeaderBytes != body_bytes)
    return empty(config, source, "truncated or padded: the header says " + std::to_string(body_bytes) + " body bytes, the file has " +
                                     std::to_string(bytes.size() - kHeaderBytes));
  const std::string_view body = bytes.substr(kHeaderBytes);
  if (crc_of(body) != get_le(bytes, 32, 4)) return empty(config, source, "checksum mismatch: the file is corrupt");
  std::string error;
  const std::string text = inflate_body(body, get_le(bytes, 24, 8), error);
  if (!error.empty()) return empty(config, source, error);
  try {
    Predictor::State state = detail::state_from_json(parse_bounded(text, config));
    std::optional<std::string> warning = limit_to(state, config, source);
    return LoadedProfile{Predictor::restore(state), std::move(warning)};
  } catch (const std::bad_alloc&) {
    return empty(config, source, "too large to load (out of memory)", Problem::access);
  } catch (const std::exception& e) {
    return empty(config, source, std::string("invalid content: ") + e.what());
  }
}

namespace {

FileIdentity identity_from(const struct stat& info) {
  return {true, static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino),
          static_cast<std::uint64_t>(info.st_size),
          static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec};
}

}  // namespace

LoadedProfile load_profile(const std::filesystem::path& path, const PredictorConfig& config) {
  // Read through one descriptor, whose identity is the file's: a store renamed over the path while
  // this one was read (`gpuqos train --out`) is then not taken for the one read (a review: the
  // next save replaced the new store with the old model, silently); what the file is is checked on
  // it too. O_NONBLOCK: a FIFO does not block the open; but a file under another's write lease
  // (Samba, an NFS delegation) then says EWOULDBLOCK, so that one is opened again, waiting.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0 && errno == EWOULDBLOCK) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const bool missing = errno == ENOENT;
    return empty(config, path.string(), missing ? "no such file" : std::string("cannot open: ") + std::strerror(errno),
                 missing ? Problem::missing : Problem::access);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info{};
  if (::fstat(fd, &info) != 0) return empty(config, path.string(), std::string("cannot stat: ") + std::strerror(errno), Problem::access);
  // A directory, a FIFO or /dev/zero would read as garbage, block, or never end.
  if (!S_ISREG(info.st_mode)) return empty(config, path.string(), "not a regular file", Problem::access);
  if (static_cast<std::uintmax_t>(info.st_size) > kMaxFileBytes) {
    return empty(config, path.string(), "implausibly large (" + std::to_string(info.st_size) + " bytes)", Problem::access);
  }
  std::string contents;
  try {
    char chunk[1 << 16];
    for (;;) {
      const ssize_t got = ::read(fd, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return empty(config, path.string(), std::string("read error: ") + std::strerror(errno), Problem::access);
      if (got == 0) break;
      contents.append(chunk, static_cast<std::size_t>(got));
      if (contents.size() > kMaxFileBytes) {
        return empty(config, path.string(), "implausibly large (over " + std::to_string(kMaxFileBytes) + " bytes)",
                     Problem::access);
      }
    }
  } catch (const std::bad_alloc&) {
    return empty(config, path.string(), "too large to load (out of memory)", Problem::access);
  }
  LoadedProfile loaded = decode_profile(contents, path.string(), config);
  loaded.identity = identity_from(info);
  return loaded;
}

std::optional<std::string> foreign_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  char head[64] = {};
  in.read(head, sizeof head);
  const auto got = static_cast<std::size_t>(in.gcount());
  if (got == 0 || std::memcmp(head, kMagic, std::min(got, sizeof kMagic)) == 0) return std::nullopt;
  // A store with a few bits of its magic flipped is a damaged store (moved aside and started anew),
  // not another tool's file: one flipped bit stopped gpuqosd at boot, called "another format" (an
  // audit). Another format's first bytes are many bits away from "GPUQOSPF".
  int flipped = 0;
  for (std::size_t i = 0; i < std::min(got, sizeof kMagic); ++i) {
    flipped += std::popcount(static_cast<unsigned>(static_cast<unsigned char>(head[i] ^ kMagic[i])));
  }
  if (got >= sizeof kMagic && flipped <= 3) return std::nullopt;
  const std::string_view text(head, got);
  if (text.starts_with("{\"format\":\"gpuqos-profile\"")) {
    return "a gpuqos profile of measurements (`gpuqos train --from " + path.string() + " --out STORE` makes a store)";
  }
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') return std::string("JSON text");
  if (first != std::string_view::npos && text[first] == '[') return std::string("JSON or TOML text");
  const bool printable = std::all_of(text.begin(), text.end(), [](char c) {
    return c == '\n' || c == '\t' || c == '\r' || static_cast<unsigned char>(c) >= 0x20;
  });
  return printable ? "text" : "a file of another format";
}

namespace {

// Whether no one but root and this user can replace an entry of theirs in `directory` (a real
// path, no links) or above it: each directory from / down is owned by one of them, and writable by
// no group or other user, or sticky (as /tmp: there only an entry's owner may rename or remove it).
// A link of theirs there, and the directories on the way to the file it names, cannot then be
// swapped by anyone else, so following it cannot be turned against the saver (a root gpuqosd).
bool only_ours(const std::filesystem::path& directory) {
  std::filesystem::path at;
  for (const std::filesystem::path& part : directory) {
    at /= part;
    struct stat info{};
    if (::lstat(at.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return false;
    if (info.st_uid != 0 && info.st_uid != ::geteuid()) return false;
    if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info.st_mode & S_ISVTX) == 0) return false;
  }
  return true;
}

// Whether users other than the directory's owner may add entries to it.
bool shared(const std::filesystem::path& directory) {
  struct stat info{};
  return ::stat(directory.c_str(), &info) != 0 || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0;
}

// The real path of the directory `path` is in (its links resolved as the kernel resolves them), or
// empty when it cannot be resolved.
std::filesystem::path real_directory_of(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path directory =
      std::filesystem::canonical(path.has_parent_path() ? path.parent_path() : std::filesystem::path("."), error);
  return error ? std::filesystem::path() : directory;
}

// The directory a link of this user's or root's points into, when that directory does not exist.
std::optional<std::filesystem::path> missing_directory_of_link(const std::filesystem::path& link, const struct stat& info) {
  if (info.st_uid != ::geteuid() && info.st_uid != 0) return std::nullopt;
  std::error_code error;
  const std::filesystem::path next = std::filesystem::read_symlink(link, error);
  if (error || next.empty()) return std::nullopt;
  const std::filesystem::path named = next.is_absolute() ? next : link.parent_path() / next;
  const std::filesystem::path directory = named.has_parent_path() ? named.parent_path() : std::filesystem::path(".");
  if (std::filesystem::exists(directory, error) || error) return std::nullopt;
  return directory;
}

}  // namespace

std::filesystem::path save_target(const std::filesystem::path& path) {
  std::filesystem::path target = path;
  for (int hops = 0; hops < 40; ++hops) {  // as many as the kernel follows
    struct stat link{};
    if (::lstat(target.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) break;
    if (link.st_uid != ::geteuid() && link.st_uid != 0) break;  // another user's link: not followed
    const std::filesystem::path here = real_directory_of(target);
    if (here.empty() || !only_ours(here)) break;
    std::error_code error;
    const std::filesystem::path next = std::filesystem::read_symlink(target, error);
    if (error || next.empty() || !next.has_filename()) break;
    const std::filesystem::path named = next.is_absolute() ? next : here / next;
    const std::filesystem::path there = real_directory_of(named);  // `..` and linked directories as the kernel sees them
    if (there.empty() || !only_ours(there)) break;
    target = there / named.filename();  // a file not there yet (a dangling link): made there
  }
  return target;
}

std::optional<std::string> why_not_saved_over(const std::filesystem::path& target) {
  struct stat info{};
  if (::lstat(target.c_str(), &info) != 0) return std::nullopt;  // nothing there (or nothing we can see)
  if (S_ISLNK(info.st_mode)) {  // one save_target did not follow
    struct stat followed{};
    if (::stat(target.c_str(), &followed) != 0 && errno == ELOOP) {  // a loop, or a chain the kernel gives up on
      return target.string() + ": too many levels of symbolic links (a loop?): nothing is saved over it";
    }
    // A link of ours to a file in a directory not made yet: save_target() could not resolve where
    // it points, which is what the user has to fix (it is no other user's link).
    if (const auto missing = missing_directory_of_link(target, info)) {
      return target.string() + " is a link to a file in " + missing->string() + ", which does not exist: nothing is saved over it";
    }
    return target.string() +
           " is a link that is not followed (another user's, or into a directory other users can change): "
           "nothing is saved over it";
  }
  if (!S_ISREG(info.st_mode)) {
    const char* kind = S_ISDIR(info.st_mode)   ? "a directory"
                       : S_ISCHR(info.st_mode) ? "a character device"
                       : S_ISBLK(info.st_mode) ? "a block device"
                       : S_ISFIFO(info.st_mode) ? "a FIFO"
                       : S_ISSOCK(info.st_mode) ? "a socket"
                                                : "not a regular file";
    return target.string() + " is " + kind + ", not a store file: nothing is saved over it";
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
  if ((info.st_mode & S_IWUSR) == 0) {
    return target.string() + " is read-only (mode " + mode + "): not saved over; make it writable, or save elsewhere";
  }
  if (::geteuid() != 0 && ::access(target.c_str(), W_OK) != 0) {
    return target.string() + " is not writable by uid " + std::to_string(::geteuid()) + " (owner uid " +
           std::to_string(info.st_uid) + ", mode " + mode + "): not saved over; save elsewhere";
  }
  return std::nullopt;
}

namespace {

// Whether both name one file (by device and inode).
bool same_file(const FileIdentity& a, const FileIdentity& b) {
  return a.exists && b.exists && a.device == b.device && a.inode == b.inode;
}

// The file at `path` itself: a link there is not followed.
FileIdentity identity_at(const std::filesystem::path& path) {
  struct stat info{};
  return ::lstat(path.c_str(), &info) == 0 ? identity_from(info) : FileIdentity{};
}

// Checked just before a rename, where the file system cannot do it in one step (a window of a
// rename's length).
int replace_if_unchanged(const std::string& temp, const std::filesystem::path& path, const FileIdentity& expected) {
  const FileIdentity there = identity_of(path);
  if (there.exists && !same_file(there, expected)) {
    errno = EEXIST;
    return -1;
  }
  return ::rename(temp.c_str(), path.c_str());
}

bool lacks_rename_flags(int error) { return error == EINVAL || error == ENOSYS; }

}  // namespace

// Where the check and the replacement are one step: gpuqosd's store and a `gpuqos train --out` of
// the same path (a review: a store trained between gpuqosd's check and its rename was replaced,
// silently).
int replace_if_still(const std::string& temp, const std::filesystem::path& path, const FileIdentity& expected,
                     RenameWithFlags rename_with_flags) {
  if (rename_with_flags == nullptr) rename_with_flags = ::renameat2;
  if (!expected.exists) {
    if (rename_with_flags(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return 0;
    if (!lacks_rename_flags(errno)) return -1;
    // No flags here (a review: on NFS a store not there yet was never saved, every save "Invalid
    // argument", and gpuqosd lost all it learned at each exit): a new name by link() fails if
    // something is there, in one step too.
    // (EEXIST for our own link: NFS retried a link whose reply was lost, as link(2) warns. The name
    // itself is looked at, not what a link planted there points to.)
    const int linked = ::link(temp.c_str(), path.c_str()) == 0 ? 0 : errno;
    if (linked == 0 || (linked == EEXIST && same_file(identity_at(path), identity_at(temp)))) {
      ::unlink(temp.c_str());
      return 0;
    }
    if (linked != EPERM && linked != ENOTSUP && linked != EOPNOTSUPP && linked != ENOSYS) {
      errno = linked;
      return -1;
    }
    return replace_if_unchanged(temp, path, expected);  // no hard links on this file system either
  }
  if (rename_with_flags(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) != 0) {
    // No exchange on this file system. The store gone: a new one is written.
    if (!lacks_rename_flags(errno) && errno != ENOENT) return -1;
    return replace_if_unchanged(temp, path, expected);
  }
  if (same_file(identity_at(temp), expected)) {  // the file swapped out, now at `temp`
    ::unlink(temp.c_str());
    return 0;
  }
  // Another's: swapped back (ours is at `temp` again).
  rename_with_flags(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE);
  errno = EEXIST;
  return -1;
}

FileIdentity identity_of(const std::filesystem::path& path) {
  struct stat info{};
  if (path.empty() || ::stat(path.c_str(), &info) != 0) return {};
  return identity_from(info);
}

std::optional<std::string> save_profile(const Predictor::State& state, const std::filesystem::path& given, SaveAs as,
                                        const std::filesystem::path& readable_as, const FileIdentity* only_over,
                                        FileIdentity* saved_as) {
  const std::filesystem::path path = as == SaveAs::store ? save_target(given) : given;
  if (as == SaveAs::store) {
    if (auto why = why_not_saved_over(path)) return why;
  }
  std::string bytes;
  try {
    bytes = encode_profile(state);
  } catch (const std::exception& e) {
    return path.string() + ": " + e.what();
  }
  // A new file of a name no one can foresee (mkostemp: O_EXCL, never through a link): the store's
  // directory may be writable by other users, and a link planted at a name known in advance would
  // have a root gpuqosd write the model over whatever it points to.
  std::string temp = path.string() + ".tmp.XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return path.string() + ".tmp.*: cannot create: " + std::strerror(errno);
  // mkostemp makes it 0600; a new store gets 0644 (gpuqos train and eval read it too). One that
  // replaces a store keeps that store's mode and group, and its owner when root saves, unless
  // another user may have planted it: in a directory others can add to (/tmp), a store of another
  // user's becomes the saver's, writable by no one else (it stayed theirs to poison before).
  struct stat replaced{};
  if (as == SaveAs::store && ::lstat(path.c_str(), &replaced) == 0 && S_ISREG(replaced.st_mode)) {
    const std::filesystem::path directory = real_directory_of(path);
    const bool ours = replaced.st_uid == ::geteuid() || replaced.st_uid == 0;
    const bool kept = !directory.empty() && only_ours(directory) && (ours || !shared(directory));
    ::fchmod(fd, replaced.st_mode & (kept ? 0777 : 0755));
    const uid_t owner = ::geteuid() == 0 && kept ? replaced.st_uid : static_cast<uid_t>(-1);
    if (kept && ::fchown(fd, owner, replaced.st_gid) != 0) {
      // not a member of its group (or no such owner): the saver's own, readable as its mode says
    }
  } else if (struct stat like{}; !readable_as.empty() && ::stat(readable_as.c_str(), &like) == 0 && S_ISREG(like.st_mode)) {
    ::fchmod(fd, 0600 | (like.st_mode & 0044));  // read by no one who cannot read `readable_as`
  } else {
    ::fchmod(fd, 0644);
  }
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += std::size_t(n);
  }
  const bool ok = written == bytes.size() && ::fsync(fd) == 0;
  const int saved_errno = errno;
  struct stat saved{};
  const bool stated = ::fstat(fd, &saved) == 0;
  ::close(fd);
  const int renamed = !ok ? -1 : only_over ? replace_if_still(temp, path, *only_over) : ::rename(temp.c_str(), path.c_str());
  if (renamed != 0) {
    const int rename_errno = errno;
    ::unlink(temp.c_str());
    if (ok && only_over && rename_errno == EEXIST) return std::string(kStoreChanged);
    return path.string() + ": cannot write: " + std::strerror(ok ? rename_errno : saved_errno);
  }
  if (saved_as) *saved_as = stated ? identity_from(saved) : identity_of(path);
  // The rename is the directory's to keep: without this, a power loss may leave the old store.
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (const int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return std::nullopt;
}

std::size_t remove_stale_temporaries(const std::filesystem::path& path) {
  constexpr auto kStaleAfter = std::chrono::hours(1);
  const std::string prefix = path.filename().string() + ".tmp.";
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::size_t removed = 0;
  std::error_code error;
  for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    struct stat info{};
    if (!name.starts_with(prefix) || ::lstat(it->path().c_str(), &info) != 0 || !S_ISREG(info.st_mode) ||
        info.st_uid != ::geteuid()) {
      continue;
    }
    const auto modified = std::chrono::system_clock::from_time_t(info.st_mtim.tv_sec);
    if (std::chrono::system_clock::now() - modified >= kStaleAfter && ::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace gpuqos::predictor
