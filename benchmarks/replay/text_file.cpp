// Whole-file reads with zlib decompression of .gz data.
#include "gpuqos/replay/text_file.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace gpuqos::replay {

namespace {

bool is_gzip(const std::string& data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b;
}

std::string too_large(const std::string& name, std::uint64_t max_bytes, const char* what) {
  return name + ": " + what + " more than " + std::to_string(max_bytes >> 20) + " MiB: not a profile or trace this reads";
}

std::string gunzip(const std::string& data, const std::string& name, std::uint64_t max_bytes) {
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw FileError(name + ": cannot initialise zlib");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = sizeof buffer;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END && zs.avail_in > 0) {  // concatenated gzip members
      out.append(buffer, sizeof buffer - zs.avail_out);
      inflateReset(&zs);
      rc = Z_OK;
      continue;
    }
    if (rc != Z_OK && rc != Z_STREAM_END) {
      const std::string why = zs.msg ? zs.msg : (rc == Z_BUF_ERROR ? "truncated data" : "error " + std::to_string(rc));
      inflateEnd(&zs);
      throw FileError(name + ": corrupt gzip data (" + why + ")");
    }
    out.append(buffer, sizeof buffer - zs.avail_out);
    if (out.size() > max_bytes) {
      inflateEnd(&zs);
      throw FileError(too_large(name, max_bytes, "inflates to"));
    }
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace

std::string read_text_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  std::error_code error;
  const auto type = std::filesystem::status(path, error).type();
  if (type == std::filesystem::file_type::character || type == std::filesystem::file_type::block) {
    throw FileError(path.string() + ": is a device, not a file");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {  // the reason (no permission, no such file) is the open's errno, which ifstream keeps
    const int why = errno;
    throw FileError(path.string() + ": cannot open for reading" + (why != 0 ? std::string(" (") + std::strerror(why) + ")" : ""));
  }
  std::string data;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    data.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (data.size() > max_bytes) throw FileError(too_large(path.string(), max_bytes, "holds"));
  }
  return is_gzip(data) ? gunzip(data, path.string(), max_bytes) : data;
}

}  // namespace gpuqos::replay
