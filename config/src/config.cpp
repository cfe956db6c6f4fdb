// Defaults, lookups and the access rule.
#include "gpuqos/config/config.h"

#include <algorithm>
#include <string>
#include <vector>

#include "names.h"
#include "values.h"

namespace gpuqos::config {

Config default_config() { return Config{}; }

const JobConfig* find_job(const Config& config, std::string_view name) noexcept {
  const auto job = std::find_if(config.jobs.begin(), config.jobs.end(),
                                [name](const JobConfig& candidate) { return candidate.name == name; });
  return job == config.jobs.end() ? nullptr : &*job;
}

std::string did_you_mean_job(const Config& config, std::string_view name) {
  std::vector<std::string_view> names;
  names.reserve(config.jobs.size());
  for (const JobConfig& job : config.jobs) names.push_back(job.name);
  return detail::did_you_mean(name, names);
}

bool may_run_high(const Config& config, uid_t uid, gid_t gid, std::span<const gid_t> supplementary_gids) noexcept {
  const AccessConfig& access = config.access;
  if (access.anyone_may_run_high || uid == 0) return true;
  const auto listed = [](const auto& list, auto id) { return std::find(list.begin(), list.end(), id) != list.end(); };
  if (listed(access.high_priority_uids, uid) || listed(access.high_priority_gids, gid)) return true;
  return std::any_of(supplementary_gids.begin(), supplementary_gids.end(),
                     [&](gid_t group) { return listed(access.high_priority_gids, group); });
}

std::string_view to_string(LogLevel level) noexcept { return detail::kLogLevelNames[static_cast<std::size_t>(level)]; }
std::string_view to_string(PolicyName name) noexcept { return detail::kPolicyNames[static_cast<std::size_t>(name)]; }
std::string_view to_string(Priority priority) noexcept {
  return detail::kPriorityNames[static_cast<std::size_t>(priority)];
}

std::string to_string(const ListenAddress& address) {
  if (!address.enabled()) return "";
  const bool ipv6 = address.host.find(':') != std::string::npos;
  const std::string host = ipv6 ? "[" + address.host + "]" : address.host;
  return host + ":" + std::to_string(address.port);
}

std::optional<std::string> parse_listen(std::string_view text, ListenAddress& out) {
  return detail::parse_listen_address(text, out);
}

std::optional<std::string> uuid_prefix(std::string_view text) {
  constexpr std::string_view kLayout = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";  // hex digits and dashes, 8-4-4-4-12
  if (!text.starts_with("GPU-") && !text.starts_with("MIG-")) return std::nullopt;
  const std::string_view rest = text.substr(4);
  if (rest.empty() || rest.size() > kLayout.size()) return std::nullopt;
  std::string prefix;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (kLayout[i] == '-' ? c != '-' : !hex) return std::nullopt;  // a dash where nvidia-smi writes one
    prefix += static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
  }
  return prefix;
}

}  // namespace gpuqos::config
