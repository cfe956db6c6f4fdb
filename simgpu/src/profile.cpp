// Loads device profiles from TOML, rejecting every key or value it does not understand.
#include "gpuqos/simgpu/profile.h"

#include <toml++/toml.h>

#include <climits>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>

namespace gpuqos::simgpu {
namespace {

std::string location(const std::string& source_name, const toml::source_region& region) {
  return source_name + ":" + std::to_string(region.begin.line) + ":" +
         std::to_string(region.begin.column);
}

// What the user wrote, for error messages: the value itself, or the kind of a container.
std::string describe(const toml::node& node) {
  std::ostringstream out;
  if (node.is_table()) {
    out << "a table";
  } else if (node.is_array()) {
    out << "an array";
  } else {
    node.visit([&out](auto&& value) { out << value; });
  }
  return out.str();
}

enum class Bound : std::uint8_t { positive, non_negative, unit_fraction };

// One key = value of a profile, with the reading and checking of its value.
class Field {
 public:
  Field(const std::string& source_name, std::string_view key, const toml::node& node)
      : source_name_(source_name), key_(key), node_(node) {}

  [[noreturn]] void fail(std::string_view must_be) const {
    throw ProfileError(location(source_name_, node_.source()) + ": key '" + std::string(key_) +
                       "': " + std::string(must_be) + ", got " + describe(node_));
  }

  int integer(int min) const {
    const std::string must_be = "must be an integer >= " + std::to_string(min);
    const auto* value = node_.as_integer();
    if (value == nullptr) fail(must_be);
    const std::int64_t v = value->get();
    if (v < min) fail(must_be);
    if (v > INT_MAX) fail("must be an integer <= " + std::to_string(INT_MAX));
    return static_cast<int>(v);
  }

  double number(Bound bound) const {
    static constexpr std::string_view kMustBe[] = {"must be a number > 0", "must be a number >= 0",
                                                   "must be a number > 0 and <= 1"};
    const std::string_view must_be = kMustBe[static_cast<int>(bound)];
    double v = 0;
    if (const auto* f = node_.as_floating_point()) {
      v = f->get();
    } else if (const auto* i = node_.as_integer()) {
      v = static_cast<double>(i->get());
    } else {
      fail(must_be);
    }
    const bool ok = std::isfinite(v) && (bound == Bound::non_negative ? v >= 0 : v > 0) &&
                    (bound != Bound::unit_fraction || v <= 1);
    if (!ok) fail(must_be);
    return v;
  }

  std::string text() const {
    const auto* value = node_.as_string();
    if (value == nullptr || value->get().empty()) fail("must be a non-empty string");
    return value->get();
  }

  ComputeMode compute_mode() const {
    const auto* value = node_.as_string();
    if (value != nullptr) {
      for (ComputeMode mode : {ComputeMode::fifo, ComputeMode::timeslice, ComputeMode::mps}) {
        if (value->get() == to_string(mode)) return mode;
      }
    }
    fail("must be one of \"fifo\", \"timeslice\", \"mps\"");
  }

 private:
  const std::string& source_name_;
  std::string_view key_;
  const toml::node& node_;
};

struct KeySpec {
  std::string_view key;
  void (*set)(const Field&, DeviceProfile&);
};

// Every key a profile may set, at top level or in a [[device]] table.
constexpr KeySpec kKeys[] = {
    {"name", [](const Field& f, DeviceProfile& p) { p.name = f.text(); }},
    {"sms", [](const Field& f, DeviceProfile& p) { p.sms = f.integer(1); }},
    {"memory_gib",
     [](const Field& f, DeviceProfile& p) {
       p.memory_gib = f.number(Bound::positive);
       // Its bytes must fit cuDeviceTotalMem's size_t (1e30 gave a device of 0 bytes).
       constexpr double kMaxGib = 17179869183.0;  // 2^34 - 1: under 2^64 bytes
       if (p.memory_gib > kMaxGib) f.fail("must be a number > 0 and <= 17179869183 (2^64 bytes)");
     }},
    {"compute_mode", [](const Field& f, DeviceProfile& p) { p.compute_mode = f.compute_mode(); }},
    {"timeslice_us",
     [](const Field& f, DeviceProfile& p) { p.timeslice_us = f.number(Bound::positive); }},
    {"h2d_gbps", [](const Field& f, DeviceProfile& p) { p.h2d_gbps = f.number(Bound::positive); }},
    {"d2h_gbps", [](const Field& f, DeviceProfile& p) { p.d2h_gbps = f.number(Bound::positive); }},
    {"d2d_gbps", [](const Field& f, DeviceProfile& p) { p.d2d_gbps = f.number(Bound::positive); }},
    {"pageable_factor",
     [](const Field& f, DeviceProfile& p) { p.pageable_factor = f.number(Bound::unit_fraction); }},
    {"copy_latency_us",
     [](const Field& f, DeviceProfile& p) { p.copy_latency_us = f.number(Bound::non_negative); }},
    {"time_scale",
     [](const Field& f, DeviceProfile& p) { p.time_scale = f.number(Bound::positive); }},
    {"cc_major", [](const Field& f, DeviceProfile& p) { p.cc_major = f.integer(1); }},
    {"cc_minor", [](const Field& f, DeviceProfile& p) { p.cc_minor = f.integer(0); }},
    {"clock_khz", [](const Field& f, DeviceProfile& p) { p.clock_khz = f.integer(1); }},
    {"memory_clock_khz",
     [](const Field& f, DeviceProfile& p) { p.memory_clock_khz = f.integer(1); }},
    {"memory_bus_width_bits",
     [](const Field& f, DeviceProfile& p) { p.memory_bus_width_bits = f.integer(1); }},
    {"l2_cache_bytes", [](const Field& f, DeviceProfile& p) { p.l2_cache_bytes = f.integer(0); }},
};

void apply_key(const std::string& source_name, const toml::key& key, const toml::node& node,
               DeviceProfile& profile) {
  for (const KeySpec& spec : kKeys) {
    if (spec.key == key.str()) {
      spec.set(Field(source_name, key.str(), node), profile);
      return;
    }
  }
  throw ProfileError(location(source_name, key.source()) + ": unknown key '" +
                     std::string(key.str()) + "'");
}

// The [[device]] tables, each starting from the top-level defaults.
std::vector<DeviceProfile> read_devices(const std::string& source_name, const toml::node& node,
                                        const DeviceProfile& defaults) {
  const toml::array* devices = node.as_array();
  if (devices == nullptr || devices->empty() || !devices->is_array_of_tables()) {
    Field(source_name, "device", node).fail("must be one or more [[device]] tables");
  }
  std::vector<DeviceProfile> profiles;
  for (const toml::node& device : *devices) {
    DeviceProfile profile = defaults;
    for (auto&& [key, value] : *device.as_table()) apply_key(source_name, key, value, profile);
    profiles.push_back(std::move(profile));
  }
  return profiles;
}

}  // namespace

const char* to_string(ComputeMode mode) {
  switch (mode) {
    case ComputeMode::fifo:
      return "fifo";
    case ComputeMode::timeslice:
      return "timeslice";
    case ComputeMode::mps:
      return "mps";
  }
  return "unknown";
}

std::vector<DeviceProfile> parse_profile(std::string_view toml_text,
                                         const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string_view(source_name));
  } catch (const toml::parse_error& error) {
    throw ProfileError(location(source_name, error.source()) + ": " +
                       std::string(error.description()));
  }
  DeviceProfile defaults;
  const toml::node* devices = nullptr;
  for (auto&& [key, value] : root) {
    if (key.str() == "device") {
      devices = &value;
    } else {
      apply_key(source_name, key, value, defaults);
    }
  }
  if (devices == nullptr) return {defaults};
  return read_devices(source_name, *devices, defaults);
}

std::vector<DeviceProfile> load_profile_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw ProfileError("cannot read profile '" + path.string() + "': no such file");
  }
  std::ifstream in(path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad() || !in.is_open()) {
    throw ProfileError("cannot read profile '" + path.string() + "'");
  }
  return parse_profile(text, path.string());
}

std::vector<DeviceProfile> default_profile() { return {DeviceProfile{}}; }

}  // namespace gpuqos::simgpu
