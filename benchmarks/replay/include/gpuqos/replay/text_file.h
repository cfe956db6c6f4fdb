// Reading a whole text file, transparently gunzipping it when it is gzip-compressed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace gpuqos::replay {

struct FileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The most read_text_file() takes, as read and as inflated: /dev/zero given as a profile, or a
// 4-MB gzip of a billion spaces, grew without end (an audit: 2.3 GB in 4 s, 1.1 GB).
inline constexpr std::uint64_t kMaxTextFileBytes = std::uint64_t{2} << 30;

// The file's contents; gzip data (by its magic bytes, whatever the extension) is decompressed.
// Throws FileError naming the file on a missing file, a device, more than `max_bytes` (read or
// inflated), or corrupt gzip data. A FIFO is read (`--from <(zcat ...)`).
std::string read_text_file(const std::filesystem::path& path, std::uint64_t max_bytes = kMaxTextFileBytes);

}  // namespace gpuqos::replay
