// Formatting the profile's records and writing the file atomically (temporary file, then rename).
#include "profile_writer.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpuqos::intercept {
namespace {

const char* direction_name(ipc::CopyDirection direction) {
  switch (direction) {
    case ipc::CopyDirection::h2d: return "h2d";
    case ipc::CopyDirection::d2h: return "d2h";
    default: return "d2d";
  }
}

const char* host_memory_name(ipc::HostMemory memory) {
  switch (memory) {
    case ipc::HostMemory::pinned: return "pinned";
    case ipc::HostMemory::pageable: return "pageable";
    default: return "none";
  }
}

std::string triple(const std::uint32_t (&v)[3]) {
  return "[" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + "]";
}

std::string times(std::uint64_t start_ns, std::uint64_t end_ns) {
  return "\"start_ns\":" + std::to_string(start_ns) + ",\"end_ns\":" + std::to_string(end_ns) + "}";
}

}  // namespace

std::string json_escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", byte);
      out += escape;
    } else {
      out += c;
    }
  }
  return out;
}

std::string kernel_line(std::string_view name, const ipc::OpDescriptor& launch, std::uint64_t start_ns,
                        std::uint64_t end_ns) {
  std::string args;
  for (std::uint8_t i = 0; i < launch.arg_count && i < ipc::kMaxScalarArgs; ++i) {
    args += (i ? "," : "") + std::to_string(launch.args[i]);
  }
  return "{\"kind\":\"kernel\",\"name\":\"" + json_escaped(name) + "\",\"device\":" + std::to_string(launch.device) +
         ",\"grid\":" + triple(launch.grid) + ",\"block\":" + triple(launch.block) +
         ",\"shared_bytes\":" + std::to_string(launch.shared_bytes) + ",\"args\":[" + args + "]," +
         times(start_ns, end_ns);
}

std::string copy_line(ipc::CopyDirection direction, ipc::HostMemory host_memory, std::uint64_t bytes,
                      std::uint64_t start_ns, std::uint64_t end_ns) {
  return std::string("{\"kind\":\"copy\",\"direction\":\"") + direction_name(direction) + "\",\"host_memory\":\"" +
         host_memory_name(host_memory) + "\",\"bytes\":" + std::to_string(bytes) + "," + times(start_ns, end_ns);
}

std::string memset_line(std::uint64_t bytes, std::uint64_t start_ns, std::uint64_t end_ns) {
  return "{\"kind\":\"memset\",\"bytes\":" + std::to_string(bytes) + "," + times(start_ns, end_ns);
}

bool ProfileWriter::open(const std::string& path, std::string_view job, int pid, std::string& why) {
  path_ = path;
  temp_path_ = path + ".tmp." + std::to_string(pid);
  // The rename at exit could not replace a directory: said now, before the run is profiled for nothing.
  if (struct stat target{}; ::stat(path.c_str(), &target) == 0 && S_ISDIR(target.st_mode)) {
    why = path + " is a directory, not a file to write";
    return false;
  }
  file_ = std::fopen(temp_path_.c_str(), "w");
  if (!file_) {
    why = "cannot write " + temp_path_ + ": " + std::strerror(errno);
    return false;
  }
  const std::string header = "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"" + json_escaped(job) +
                             "\",\"pid\":" + std::to_string(pid) + "}\n";
  std::fputs(header.c_str(), file_);
  return true;
}

void ProfileWriter::write_line(const std::string& line) {
  if (!file_) return;
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  ++records_;
}

bool ProfileWriter::commit(std::string& why) {
  if (!file_) return false;
  const bool written = std::ferror(file_) == 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!written || !closed) {
    why = "cannot write " + temp_path_ + " (disk full?)";
    std::remove(temp_path_.c_str());
    return false;
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    why = "cannot rename " + temp_path_ + " to " + path_ + ": " + std::strerror(errno);
    std::remove(temp_path_.c_str());
    return false;
  }
  return true;
}

void ProfileWriter::discard() {
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(temp_path_.c_str());
}

}  // namespace gpuqos::intercept
