// The results folder of a gpuqos-bench run (--out): held against a second bench writing to it,
// cleared of the previous run's results, and its result files written whole or not at all.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpuqos::qos {

// An exclusive flock(2) on DIR/.lock while it lives (DIR is created if missing). Two benches with
// the same --out would overwrite each other's runs/<run>.json, logs and results. Throws
// std::runtime_error saying so when another process holds the lock. The descriptor is
// close-on-exec: a child that outlived the bench must not keep the folder locked.
class OutDirLock {
 public:
  explicit OutDirLock(const std::filesystem::path& dir);
  ~OutDirLock();
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes `files` and every file ending in `extension` ("" for none) directly in `dir`, so that
// results of an earlier run are never read as this one's when this one ends early or fails.
// Returns the names removed. Contract: the caller holds the folder's OutDirLock.
std::vector<std::string> remove_previous_results(const std::filesystem::path& dir, const std::vector<std::string>& files,
                                                 const std::string& extension);

// `document` indented as JSON text. Bytes that are not UTF-8 (a path, a log's tail) become U+FFFD,
// where nlohmann's dump() throws (type_error 316): a report must not be lost to one odd byte.
std::string json_text(const nlohmann::json& document);

// `text` with every byte that is not part of valid UTF-8 replaced by U+FFFD, the rest as it was: a
// table (qos.md) quotes reasons and log lines of child processes, which may hold any bytes.
std::string valid_utf8(const std::string& text);

// Writes `text` to a temp file beside `path`, flushes it to disk and renames it over `path`: a
// reader sees the old file or the whole new one, never an empty or cut one. Throws
// std::runtime_error naming `path` and the reason (a full disk) when it cannot; the old file is
// then left as it was.
void write_file_whole(const std::filesystem::path& path, const std::string& text);

}  // namespace gpuqos::qos
