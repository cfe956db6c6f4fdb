// DeviceTable: ops renumbered from each process's ordinals to the node's GPUs (device_table.h).
#include "gpuqos/scheduler/device_table.h"

#include <fmt/format.h>

#include <algorithm>

namespace gpuqos::scheduler {
namespace {

bool said_nothing(const DeviceTable::Uuid& uuid) {
  return std::all_of(uuid.begin(), uuid.end(), [](std::uint8_t byte) { return byte == 0; });
}

}  // namespace

std::string DeviceTable::uuid_text(const Uuid& uuid) { return "GPU-" + ipc::uuid_hex(uuid); }

std::optional<std::uint32_t> DeviceTable::free_number(std::uint32_t preferred) const {
  if (preferred < ipc::kMaxDevices && !by_number_.contains(preferred)) return preferred;
  for (std::uint32_t number = 0; number < ipc::kMaxDevices; ++number) {
    if (!by_number_.contains(number)) return number;
  }
  for (const auto& [number, uuid] : by_number_) {  // the lowest one no client uses
    if (by_uuid_.at(uuid).clients == 0) return number;
  }
  return std::nullopt;
}

void DeviceTable::use(ClientId client, std::uint32_t number) {
  if (!used_[client].insert(number).second) return;
  if (const auto it = by_number_.find(number); it != by_number_.end()) ++by_uuid_.at(it->second).clients;
}

std::size_t DeviceTable::gpus_of_user(std::uint32_t uid) const {
  std::set<std::uint32_t> numbers;
  for (const auto& [client, ordinals] : said_) {
    const auto user = uid_of_.find(client);
    if (user == uid_of_.end() || user->second != uid) continue;
    for (const auto& [ordinal, said] : ordinals) numbers.insert(said.device);
  }
  return numbers.size();
}

DeviceTable::Renumbered DeviceTable::renumber(ClientId client, std::uint32_t ordinal, const Uuid& uuid, bool work,
                                              std::uint32_t uid) {
  uid_of_.emplace(client, uid);
  auto& said = said_[client];
  const auto known = said.find(ordinal);
  if (said_nothing(uuid)) {
    if (known != said.end()) return {known->second.device};
    Renumbered out{ordinal};
    if (work && said.empty() && !by_uuid_.empty() && told_no_uuid_.insert(client).second) {
      out.note = fmt::format("its GPU ops say no device UUID (a shim older than gpuqosd, or a driver that cannot "
                             "say): its device {} is taken as gpuqosd's device {}, which under CUDA_VISIBLE_DEVICES "
                             "may be another GPU",
                             ordinal, ordinal);
    }
    return out;
  }
  if (known != said.end()) {
    if (known->second.uuid == uuid) return {known->second.device};
    return {.error = fmt::format("device {} was {}, now it says {}", ordinal, uuid_text(known->second.uuid),
                                 uuid_text(uuid))};
  }
  if (said.size() >= kMaxGpusPerClient) return {.error = fmt::format("it names more than {} GPUs", kMaxGpusPerClient)};
  Renumbered out;
  auto device = by_uuid_.find(uuid);
  if (device != by_uuid_.end() && device->second.clients == 0 && device->second.first_ordinal != ordinal) {
    device->second.first_ordinal = ordinal;  // no job uses it: the settings of the ordinal this one calls it
    out.settings_moved = true;
  }
  if (device == by_uuid_.end()) {
    if (gpus_of_user(uid) >= kMaxGpusPerUser) {
      return {.error = fmt::format("its user's processes name more than {} GPUs", kMaxGpusPerUser)};
    }
    const std::optional<std::uint32_t> number = free_number(ordinal);
    if (!number) {
      if (told_full_.size() < kMaxToldFull && told_full_.insert(uuid).second) {
        out.note = fmt::format("{} GPUs in use: {} is taken as device {}, as its job calls it, and shares its "
                               "numbers with the GPU that has it", ipc::kMaxDevices, uuid_text(uuid), ordinal);
      }
      out.device = ordinal;
      return out;  // not remembered: asked again, and numbered when a number frees up
    }
    const auto held = by_number_.find(*number);
    const bool held_before = held != by_number_.end();
    if (held_before) {  // no client uses it
      out.note = fmt::format("device {} is {} from now on; it was {}, which no job uses", *number, uuid_text(uuid),
                             uuid_text(held->second));
      by_uuid_.erase(held->second);
    }
    by_number_[*number] = uuid;
    device = by_uuid_.emplace(uuid, Device{*number, uuid, ordinal, 0}).first;
    out.added = true;
    out.settings_moved = *number != ordinal || held_before;
  }
  said.emplace(ordinal, Said{uuid, device->second.number});
  use(client, device->second.number);
  out.device = device->second.number;
  return out;
}

void DeviceTable::client_gone(ClientId client) {
  said_.erase(client);
  uid_of_.erase(client);
  told_no_uuid_.erase(client);
  const auto used = used_.find(client);
  if (used == used_.end()) return;
  for (const std::uint32_t number : used->second) {
    if (const auto it = by_number_.find(number); it != by_number_.end()) --by_uuid_.at(it->second).clients;
  }
  used_.erase(used);
}

std::uint32_t DeviceTable::config_ordinal(std::uint32_t number) const {
  const auto it = by_number_.find(number);
  return it == by_number_.end() ? number : by_uuid_.at(it->second).first_ordinal;
}

std::optional<DeviceTable::Uuid> DeviceTable::uuid_of(std::uint32_t number) const {
  const auto it = by_number_.find(number);
  if (it == by_number_.end()) return std::nullopt;
  return it->second;
}

bool DeviceTable::renumbered() const {
  return std::any_of(by_uuid_.begin(), by_uuid_.end(),
                     [](const auto& entry) { return entry.second.number != entry.second.first_ordinal; });
}

std::vector<DeviceTable::Device> DeviceTable::devices() const {
  std::vector<Device> out;
  for (const auto& [number, uuid] : by_number_) out.push_back(by_uuid_.at(uuid));
  return out;
}

}  // namespace gpuqos::scheduler
