// [daemon], [devices] and [access]: the daemon's own settings and who may do what.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>
#include <limits>

#include "names.h"
#include "readers.h"
#include "sections.h"

namespace gpuqos::config::detail {
namespace {

constexpr std::size_t kMaxSocketPathBytes = 107;  // sockaddr_un::sun_path, with its NUL
constexpr std::int64_t kMaxId = std::numeric_limits<std::uint32_t>::max() - 1;  // (uid_t)-1 is "no id"

// A path with a NUL or another control character: the system cuts it at the NUL (a review's
// "/tmp/x\u0000y" passed --check-config, and gpuqosd made /tmp/x.lock and then said "/tmp/x y exists
// and is not a socket" with no place in the file), and the others are typos no file name means.
// Also a C1 control (U+0080-U+009F, UTF-8 C2 80-9F), which a terminal takes for CSI and the like
// when gpuqosd's summary or log shows the path (a review).
std::optional<std::string> control_character_in(std::string_view path) {
  for (std::size_t i = 0; i < path.size(); ++i) {
    auto c = static_cast<unsigned char>(path[i]);
    const bool c1 = c == 0xC2 && i + 1 < path.size() && static_cast<unsigned char>(path[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(path[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7f || c1) {
      if (c1) c = static_cast<unsigned char>(path[i + 1]);
      char code[8];
      std::snprintf(code, sizeof code, "U+%04X", c);
      return "must not contain control characters (" + std::string(code) + " at byte " + std::to_string(i) + ")";
    }
  }
  return std::nullopt;
}

void read_path(Section& section, std::string_view key, std::string& out) {
  auto path = section.string(key);
  if (!path) return;
  if (auto why = control_character_in(*path)) return section.error(key, *why);
  out = std::move(*path);
}

void read_socket(Section& section, std::string& out) {
  auto path = section.string("socket");
  if (!path) return;
  if (auto why = control_character_in(*path)) {
    section.error("socket", *why);
  } else if (path->empty()) {
    section.error("socket", "must not be empty");
  } else if (path->size() > kMaxSocketPathBytes) {
    section.error("socket", "must be at most " + std::to_string(kMaxSocketPathBytes) +
                                " bytes (a Unix socket path; got " + std::to_string(path->size()) + ")");
  } else {
    out = std::move(*path);
  }
}

void read_listen(Section& section, ListenAddress& out) {
  const auto text = section.string("metrics_listen");
  if (!text) return;
  ListenAddress address;
  if (text->empty()) {
    out = address;  // off
  } else if (auto why = parse_listen_address(*text, address)) {
    section.error("metrics_listen", *why + " (got " + quoted(*text) + ")");
  } else {
    out = address;
  }
}

}  // namespace

void read_daemon(Diagnostics& diagnostics, const toml::table& table, DaemonConfig& out) {
  Section section(diagnostics, table, "daemon", kDaemonKeys);
  read_socket(section, out.socket_path);
  read_choice(section, "log_level", kLogLevelNames, out.log_level);
  read_listen(section, out.metrics_listen);
  read_path(section, "profile_store", out.profile_store);
  read_number_up_to(section, "profile_save_interval_s", Bound::at_least, 0, std::numeric_limits<std::uint32_t>::max(),
                    out.profile_save_interval_s);
}

// uuids: GPUs by UUID as nvidia-smi -L writes them (or prefixes), at most kMaxDeviceUuids.
void read_device_uuids(Section& section, DevicesConfig& out) {
  constexpr std::string_view kKey = "uuids";
  const toml::array* array = section.array(kKey);
  if (array == nullptr) return;
  if (array->empty()) section.error(kKey, "must list at least one GPU (leave it out to manage every device)");
  if (array->size() > kMaxDeviceUuids) {
    section.error(kKey, "must list at most " + std::to_string(kMaxDeviceUuids) + " GPUs (got " +
                            std::to_string(array->size()) + ")");
    return;
  }
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = *array->get(i);
    const auto* text = element.as_string();
    const auto prefix = text ? uuid_prefix(text->get()) : std::nullopt;
    std::string problem;
    if (!prefix) {
      problem = "must be a GPU UUID as nvidia-smi -L writes it, or a prefix of one, like \"GPU-5053021f\" (got " +
                (text ? quoted(text->get()) : std::string(type_phrase(element.type()))) + ")";
    } else if (std::find(out.uuids.begin(), out.uuids.end(), *prefix) != out.uuids.end()) {
      problem = quoted(text->get()) + " is listed twice";
    } else {
      out.uuids.push_back(*prefix);
      continue;
    }
    section.diagnostics().error(element.source().begin, section.key_path(kKey) + "[" + std::to_string(i) + "]", problem);
  }
}

void read_devices(Diagnostics& diagnostics, const toml::table& table, DevicesConfig& out) {
  Section section(diagnostics, table, "devices", kDevicesKeys);
  read_device_uuids(section, out);
  std::vector<std::int64_t> ordinals;
  if (!read_integer_list(section, "ordinals", 0, kMaxDeviceOrdinal, ordinals)) return;
  const toml::array* array = section.find("ordinals")->as_array();
  if (array != nullptr && array->empty())
    section.error("ordinals", "must list at least one device (leave it out to manage every device)");
  out.ordinals.assign(ordinals.begin(), ordinals.end());
}

void read_access(Diagnostics& diagnostics, const toml::table& table, AccessConfig& out) {
  Section section(diagnostics, table, "access", kAccessKeys);
  std::vector<std::int64_t> uids;
  std::vector<std::int64_t> gids;
  const bool has_uids = read_integer_list(section, "high_priority_uids", 0, kMaxId, uids);
  const bool has_gids = read_integer_list(section, "high_priority_gids", 0, kMaxId, gids);
  if (!has_uids && !has_gids) return;
  out.anyone_may_run_high = false;
  out.high_priority_uids.assign(uids.begin(), uids.end());
  out.high_priority_gids.assign(gids.begin(), gids.end());
}

}  // namespace gpuqos::config::detail
