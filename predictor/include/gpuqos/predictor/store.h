// The predictor's profile file: everything a Predictor learned, loaded when the daemon starts and
// saved periodically and at exit, so predictions are good from the first launch.
//
// Layout (version 1): a 40-byte little-endian header, then the body.
//   magic "GPUQOSPF" | u32 version | u32 flags (0) | u64 body bytes | u64 JSON bytes |
//   u32 CRC-32 of the body | u32 reserved (0)
// The body is the zlib-compressed JSON of Predictor::State (profile_json.h).
//
// Contract: loading never throws on bad content (only std::bad_alloc can escape). A missing,
// truncated, corrupt or newer-version file gives an empty predictor and a warning that names the
// file and the problem. Saving writes a temporary file beside the target, fsyncs it and renames it
// over the target, so a reader sees the old or the new profile, never a partial one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "gpuqos/predictor/config.h"
#include "gpuqos/predictor/predictor.h"

namespace gpuqos::predictor {

inline constexpr std::uint32_t kProfileFileVersion = 1;

// Which file is at a path (none: exists false), to tell whether someone else wrote it since.
struct FileIdentity {
  bool exists = false;
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

struct LoadedProfile {
  Predictor predictor;
  std::optional<std::string> warning;  // set when the profile was not (entirely) used
  // A file is there and its content could not be used (corrupt, truncated, a newer version): saving
  // over it would destroy what may be a good profile this build cannot read.
  bool unreadable = false;
  // A file is there and could not be read at all (no permission, a read error, out of memory, not a
  // regular file): it may be perfectly good, so it must be neither saved over nor moved.
  bool inaccessible = false;
  // The file the bytes were read from (load_profile: taken from the open file, so a file renamed
  // over the path while it was read is not taken for the one read); none when nothing was read.
  FileIdentity identity;
};

// `config` is used when the profile cannot be used; a loaded profile keeps the configuration it was
// trained with, its sm_count included (`gpuqos train --sms`): the loader has no device to compare it
// with (gpuqosd learns of devices only through its clients), so a difference is not its to judge.
// Its memory bounds (max_kernels, max_samples_per_kernel, stats_window) are the loader's to set:
// they are cut to `config`'s, and what that drops is counted in the warning (the rest is loaded).
LoadedProfile load_profile(const std::filesystem::path& path, const PredictorConfig& config);
// What the file at `path` is when it is plainly not a predictor store, whole or damaged: a regular,
// non-empty file that does not start as every store does (a measurement profile, a trace, a config).
// nullopt for a store, a damaged one, an empty file, no file or one that cannot be read. A store's
// path pointed at such a file is a mistake to refuse: loading would move it aside and saving
// replace it.
std::optional<std::string> foreign_file(const std::filesystem::path& path);

// The file a save of `path` replaces: `path`, or, when `path` is a link of this user's or root's
// (`current.gqp -> v3.gqp`), the file it names, so the link stays a link; a chain of links is
// followed while each link, and the directory of the file it names, sits in a directory only root
// and this user can change (no group or other write bit from / down). A link another user made, or
// one into a directory others can change, is not followed: it is returned itself.
std::filesystem::path save_target(const std::filesystem::path& path);
// Why a save must not replace what is at `target` (save_target's): a link save_target did not
// follow, a path that is not a regular file (a device such as /dev/null, a FIFO, a directory), a
// read-only store (its owner's write bit off: the owner's word to keep it) or one this user may not
// write. nullopt: it may be replaced, or nothing is there.
std::optional<std::string> why_not_saved_over(const std::filesystem::path& target);

enum class SaveAs {
  store,     // a user's store: save_target's file; what why_not_saved_over refuses is refused
  own_file,  // a file of the saver's own at a name of its own (gpuqosd's `<store>.gpuqosd-<pid>`):
             // whatever is at that name is replaced (a link or a read-only file planted there too)
};

FileIdentity identity_of(const std::filesystem::path& path);

// save_profile's error when `only_over` was not the file at the target any more: nothing replaced.
inline constexpr std::string_view kStoreChanged = "written by someone else since it was read";

// Saves atomically (a temporary file beside the target, fsynced and renamed over it). A store
// replaced keeps its mode and group, and its owner when root saves, in a directory only root and
// the saver can change. A new file is 0644, or, with `readable_as` (the store an own file is saved
// beside), readable by no one who cannot read that file. The error, or nullopt on success.
// `only_over`: the file the target must still be (by device and inode; or none), checked in the
// same step as the replacement (an exchange of the two names, swapped back when it was another),
// else kStoreChanged; `saved_as`: the file saved, as it was at the target on success.
// A state taken from the predictor (Predictor::state) may be saved on another thread while the
// predictor goes on learning: gpuqosd's periodic save (encoding and writing take 0.3-0.5 s for 512
// kernels of 64 shapes each, 8-26 s for a full table).
std::optional<std::string> save_profile(const Predictor::State& state, const std::filesystem::path& path,
                                        SaveAs as = SaveAs::store, const std::filesystem::path& readable_as = {},
                                        const FileIdentity* only_over = nullptr, FileIdentity* saved_as = nullptr);
inline std::optional<std::string> save_profile(const Predictor& predictor, const std::filesystem::path& path,
                                               SaveAs as = SaveAs::store, const std::filesystem::path& readable_as = {},
                                               const FileIdentity* only_over = nullptr,
                                               FileIdentity* saved_as = nullptr) {
  return save_profile(predictor.state(), path, as, readable_as, only_over, saved_as);
}

// save_profile's last step: puts the file `temp` at `path` if what is there is still `expected` (by
// device and inode; or none), in one step with the check (renameat2 with RENAME_NOREPLACE or
// RENAME_EXCHANGE); where the file system has no such flags (NFS, most FUSE file systems, kernels
// before 3.15) by link() for a new file, else checked just before a rename. Errors as rename's, and
// EEXIST when it was another file (then `temp` is left and `path` as it was). `rename_with_flags`:
// ::renameat2, or a test's stand-in for a file system without the flags.
using RenameWithFlags = int (*)(int old_dir, const char* old_path, int new_dir, const char* new_path, unsigned flags);
int replace_if_still(const std::string& temp, const std::filesystem::path& path, const FileIdentity& expected,
                     RenameWithFlags rename_with_flags = nullptr);

// Removes what saves cut short left beside `path` (save_profile's temporary files, whose random
// names no later save reuses): regular files of this user named `<path>.tmp.*`, at least an hour
// old, never a link. How many it removed.
std::size_t remove_stale_temporaries(const std::filesystem::path& path);

// The same, in memory.
std::string encode_profile(const Predictor::State& state);
inline std::string encode_profile(const Predictor& predictor) { return encode_profile(predictor.state()); }
LoadedProfile decode_profile(std::string_view bytes, const std::string& source, const PredictorConfig& config);

}  // namespace gpuqos::predictor
