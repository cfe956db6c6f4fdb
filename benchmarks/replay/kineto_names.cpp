// What Kineto copy and memset names say: direction, host memory kind, size.
#include <cmath>
#include <regex>

#include "gpuqos/replay/kineto.h"

namespace gpuqos::replay {

std::optional<std::uint64_t> bytes_from_name(const std::string& name) {
  static const std::regex size_re(R"((\d+(?:\.\d+)?)\s*(bytes?|[kmg]i?b|b)(?![a-z]))", std::regex::icase);
  std::smatch m;
  if (!std::regex_search(name, m, size_re)) return std::nullopt;
  std::string unit = m[2].str();
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (!unit.empty() && unit != "b" && unit.rfind("byte", 0) != 0) {
    const bool binary = unit.size() == 3;  // kib, mib, gib
    const double base = binary ? 1024.0 : 1000.0;
    scale = unit[0] == 'k' ? base : unit[0] == 'm' ? base * base : base * base * base;
  }
  return static_cast<std::uint64_t>(std::llround(std::stod(m[1].str()) * scale));
}

CopyDirection direction_from_name(const std::string& name) {
  if (name.find("HtoD") != std::string::npos) return CopyDirection::h2d;
  if (name.find("DtoH") != std::string::npos) return CopyDirection::d2h;
  if (name.find("DtoD") != std::string::npos) return CopyDirection::d2d;
  return CopyDirection::other;
}

HostMemory host_memory_from_name(const std::string& name, CopyDirection direction) {
  if (direction != CopyDirection::h2d && direction != CopyDirection::d2h) return HostMemory::none;
  if (name.find("Pageable") != std::string::npos) return HostMemory::pageable;
  if (name.find("Pinned") != std::string::npos) return HostMemory::pinned;
  return HostMemory::unknown;
}

}  // namespace gpuqos::replay
