// [policy], [policy.baymax] and [policy.fifo].
#include <algorithm>
#include <charconv>
#include <limits>
#include <map>

#include "names.h"
#include "readers.h"
#include "sections.h"

namespace gpuqos::config::detail {
namespace {

constexpr std::uint64_t kMinChunkBytes = 64 * 1024;
constexpr std::int64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();

std::optional<std::uint64_t> chunk_bytes_value(Section& section, const toml::node& node) {
  constexpr std::string_view kKey = "copy_chunk_bytes";
  if (const auto* integer = node.as_integer()) {
    if (!check_integer_range(section, kKey, integer->get(), 0, std::numeric_limits<std::int64_t>::max()))
      return std::nullopt;
    return static_cast<std::uint64_t>(integer->get());
  }
  const auto* text = node.as_string();
  const std::string got = text ? quoted(text->get()) : std::string(type_phrase(node.type()));
  const auto bytes = text ? parse_byte_size(text->get()) : std::nullopt;
  if (!bytes)
    section.error(kKey,
                  "must be a byte count like 4194304 or \"4MiB\" (units B, KiB, MiB, GiB, TiB) (got " + got + ")");
  return bytes;
}

void read_chunk_bytes(Section& section, std::uint64_t& out) {
  const toml::node* node = section.find("copy_chunk_bytes");
  if (node == nullptr) return;
  const auto bytes = chunk_bytes_value(section, *node);
  if (!bytes) return;
  if (*bytes != 0 && *bytes < kMinChunkBytes) {
    section.error("copy_chunk_bytes",
                  "must be 0 (no chunking) or at least 65536 (64 KiB) (got " + std::to_string(*bytes) + ")");
    return;
  }
  out = *bytes;
}

constexpr std::string_view kUuidExample = "\"GPU-5053021f\"";

// preemptive_device: true or false for every device, or the devices that time-slice: ordinals, and
// GPU UUIDs (or prefixes of them) for jobs that each number their GPUs (CUDA_VISIBLE_DEVICES).
void read_preemptive(Section& section, BaymaxConfig& out) {
  constexpr std::string_view kKey = "preemptive_device";
  const toml::node* node = section.find(kKey);
  if (node == nullptr) return;
  if (const auto* flag = node->as_boolean()) {
    out.preemptive_device = flag->get();
    out.preemptive_ordinals.clear();
    out.preemptive_uuids.clear();
    return;
  }
  const toml::array* array = node->as_array();
  if (array == nullptr) {
    section.error(kKey, "must be true, false or a list of device ordinals and GPU UUIDs like [0, " +
                            std::string(kUuidExample) + "] (got " + std::string(type_phrase(node->type())) + ")");
    return;
  }
  out.preemptive_device = false;
  out.preemptive_ordinals.clear();
  out.preemptive_uuids.clear();
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = *array->get(i);
    std::string problem;
    if (const auto* integer = element.as_integer()) {
      const std::int64_t ordinal = integer->get();
      if (ordinal < 0 || ordinal > kMaxDeviceOrdinal) {
        problem = "must be a device ordinal 0 to 63 (got " + std::to_string(ordinal) + ")";
      } else if (std::find(out.preemptive_ordinals.begin(), out.preemptive_ordinals.end(), ordinal) !=
                 out.preemptive_ordinals.end()) {
        problem = std::to_string(ordinal) + " is listed twice";
      } else {
        out.preemptive_ordinals.push_back(static_cast<std::uint32_t>(ordinal));
      }
    } else if (const auto* text = element.as_string()) {
      const auto prefix = uuid_prefix(text->get());
      if (!prefix) {
        problem = "must be a GPU UUID as nvidia-smi -L writes it, or a prefix of one, like " +
                  std::string(kUuidExample) + " (got " + quoted(text->get()) + ")";
      } else if (std::find(out.preemptive_uuids.begin(), out.preemptive_uuids.end(), *prefix) !=
                 out.preemptive_uuids.end()) {
        problem = quoted(text->get()) + " is listed twice";
      } else {
        out.preemptive_uuids.push_back(*prefix);
      }
    } else {
      problem = "must be a device ordinal or a GPU UUID (got " + std::string(type_phrase(element.type())) + ")";
    }
    if (!problem.empty()) {
      section.diagnostics().error(element.source().begin, section.key_path(kKey) + "[" + std::to_string(i) + "]",
                                  problem);
    }
  }
}

// A device ordinal written as a key ("0" to "63", no leading zero: one key per device), or nothing.
std::optional<std::uint32_t> ordinal_key(std::string_view key) {
  std::uint32_t ordinal = 0;
  const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), ordinal);
  if (error != std::errc{} || end != key.data() + key.size() || ordinal > kMaxDeviceOrdinal ||
      key != std::to_string(ordinal))
    return std::nullopt;
  return ordinal;
}

// timeslice_ms: one slice for every device, or a table of slices by device ordinal, with `default`
// for the devices it does not name (nvidia-smi sets the time slice per GPU).
void read_timeslice(Section& section, BaymaxConfig& out) {
  constexpr std::string_view kKey = "timeslice_ms";
  // At least 1 us: the daemon counts in ns, and a slice that rounds to 0 would let everything through.
  constexpr double kMinimum = kMinPositiveMs;
  const toml::node* node = section.find(kKey);
  if (node == nullptr) return;
  const toml::table* table = node->as_table();
  if (table == nullptr) {
    if (!node->is_number()) {
      section.error(kKey, "must be a number of ms or a table of them by device ordinal or GPU UUID, like "
                          "{ default = 2.0, 1 = 1.0, GPU-5053021f = 1.0 } (got " +
                              std::string(type_phrase(node->type())) + ")");
      return;
    }
    read_ms(section, kKey, Bound::at_least, kMinimum, out.timeslice_ms);
    return;
  }
  if (table->empty()) {
    section.error(kKey, "must set default or the slice of at least one device ordinal (got an empty table)");
    return;
  }
  std::vector<std::string_view> keys;
  for (const auto& [key, value] : *table) keys.push_back(key.str());
  Section slices(section.diagnostics(), *table, section.key_path(kKey), std::move(keys));
  std::map<std::uint32_t, double> by_device;
  std::map<std::string, double> by_uuid;
  for (const auto& [key, value] : *table) {
    if (key.str() == "default") {
      read_ms(slices, key.str(), Bound::at_least, kMinimum, out.timeslice_ms);
      continue;
    }
    const auto ordinal = ordinal_key(key.str());
    const auto uuid = ordinal ? std::nullopt : uuid_prefix(key.str());
    if (!ordinal && !uuid) {
      slices.diagnostics().error(key.source().begin, slices.key_path(key.str()),
                                 "must be a device ordinal 0 to 63, a GPU UUID (or a prefix of one, like "
                                 "GPU-5053021f) or default");
      continue;
    }
    double ms = 0;  // stays 0 (below the minimum) when the value is bad
    read_ms(slices, key.str(), Bound::at_least, kMinimum, ms);
    if (ms < kMinimum) continue;
    if (ordinal) {
      by_device.emplace(*ordinal, ms);
    } else if (!by_uuid.emplace(*uuid, ms).second) {
      slices.diagnostics().error(key.source().begin, slices.key_path(key.str()),
                                 "names the same GPUs as another key (UUIDs are read without case)");
    }
  }
  out.device_timeslice_ms = std::move(by_device);
  out.uuid_timeslice_ms = std::move(by_uuid);
}

// The adaptation bounds must be ordered, and contain the starting bound when adaptation is on. Each
// problem is reported at a key the file sets (a default cannot be wrong on its own).
void check_bounds(Section& section, const BaymaxConfig& baymax) {
  const std::string min = format_number(baymax.min_backlog_bound_ms);
  const std::string max = format_number(baymax.max_backlog_bound_ms);
  const std::string bound = format_number(baymax.be_backlog_bound_ms);
  if (baymax.max_backlog_bound_ms < baymax.min_backlog_bound_ms) {
    if (section.find("max_backlog_bound_ms"))
      section.error("max_backlog_bound_ms", "must be >= min_backlog_bound_ms (" + min + ") (got " + max + ")");
    else
      section.error("min_backlog_bound_ms", "must be <= max_backlog_bound_ms (" + max + ") (got " + min + ")");
    return;
  }
  if (!baymax.adaptation) return;
  const bool below = baymax.be_backlog_bound_ms < baymax.min_backlog_bound_ms;
  if (!below && baymax.be_backlog_bound_ms <= baymax.max_backlog_bound_ms) return;
  if (section.find("be_backlog_bound_ms"))
    section.error("be_backlog_bound_ms", "must be within min_backlog_bound_ms and max_backlog_bound_ms (" + min +
                                             " to " + max + ") when adaptation is on (got " + bound + ")");
  else if (below)
    section.error("min_backlog_bound_ms",
                  "must be <= be_backlog_bound_ms (" + bound + ") when adaptation is on (got " + min + ")");
  else
    section.error("max_backlog_bound_ms",
                  "must be >= be_backlog_bound_ms (" + bound + ") when adaptation is on (got " + max + ")");
}

void read_baymax(Diagnostics& diagnostics, const toml::table& table, BaymaxConfig& out) {
  Section section(diagnostics, table, "policy.baymax", kBaymaxKeys);
  read_ms(section, "safety_margin_ms", Bound::at_least, 0, out.safety_margin_ms);
  read_ms(section, "be_backlog_bound_ms", Bound::at_least, kMinPositiveMs, out.be_backlog_bound_ms);
  read_integer(section, "max_be_transfers", 0, kMaxU32, out.max_be_transfers);
  read_chunk_bytes(section, out.copy_chunk_bytes);
  read_bool(section, "adaptation", out.adaptation);
  read_ms(section, "min_backlog_bound_ms", Bound::at_least, kMinPositiveMs, out.min_backlog_bound_ms);
  read_ms(section, "max_backlog_bound_ms", Bound::at_least, kMinPositiveMs, out.max_backlog_bound_ms);
  read_ms(section, "adapt_step_ms", Bound::at_least, kMinPositiveMs, out.adapt_step_ms);
  read_preemptive(section, out);
  read_timeslice(section, out);
  read_bool(section, "bound_by_slices", out.bound_by_slices);
  read_number_up_to(section, "idle_bound_factor", Bound::at_least, 1, kMaxIdleBoundFactor, out.idle_bound_factor);
  read_number_up_to(section, "long_op_tail_share", Bound::above, 0, 1, out.long_op_tail_share);
  check_bounds(section, out);
}

void read_fifo(Diagnostics& diagnostics, const toml::table& table, FifoConfig& out) {
  Section section(diagnostics, table, "policy.fifo", kFifoKeys);
  read_integer(section, "max_outstanding", 0, kMaxU32, out.max_outstanding);
}

}  // namespace

void read_policy(Diagnostics& diagnostics, const toml::table& table, PolicyConfig& out) {
  Section section(diagnostics, table, "policy", kPolicyKeys);
  read_choice(section, "name", kPolicyNames, out.name);
  if (const toml::node* name = section.find("name")) out.name_place = diagnostics.place(name->source().begin);
  if (const toml::table* baymax = section.table("baymax")) read_baymax(diagnostics, *baymax, out.baymax);
  if (const toml::table* fifo = section.table("fifo")) read_fifo(diagnostics, *fifo, out.fifo);
}

}  // namespace gpuqos::config::detail
