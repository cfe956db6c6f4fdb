// Reading a whole text file, transparently gunzipping it when it is gzip-compressed.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace gpuqos::replay {

struct FileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The file's contents; gzip data (by its magic bytes, whatever the extension) is decompressed.
// Throws FileError naming the file on a missing file or corrupt gzip data.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace gpuqos::replay
