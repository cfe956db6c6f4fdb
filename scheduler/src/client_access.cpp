// The access check of a registration, the peer's supplementary groups, and a client's ClientInfo.
#include "gpuqos/scheduler/client_access.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

namespace gpuqos::scheduler {

PriorityDecision decide_priority(const config::Config& config, std::string_view job, ipc::Priority claimed,
                                 const ipc::PeerCredentials& peer, std::span<const gid_t> supplementary_gids) {
  if (claimed != ipc::Priority::high) return {claimed, {}};
  const config::JobConfig* entry = config::find_job(config, job);
  if (entry && entry->allowed_priority == config::Priority::low) {
    return {ipc::Priority::low, "its [[job]] entry says allowed_priority = \"low\""};
  }
  if (!config::may_run_high(config, peer.uid, peer.gid, supplementary_gids)) {
    return {ipc::Priority::low,
            "[access] lets neither uid " + std::to_string(peer.uid) + " nor its groups run high priority"};
  }
  return {ipc::Priority::high, {}};
}

std::vector<gid_t> parse_status_groups(std::string_view status_text) {
  constexpr std::string_view kKey = "Groups:";
  std::size_t at = status_text.starts_with(kKey) ? 0 : status_text.find("\nGroups:");
  if (at == std::string_view::npos) return {};
  at += status_text[at] == '\n' ? 1 + kKey.size() : kKey.size();
  const std::size_t end = std::min(status_text.find('\n', at), status_text.size());
  std::vector<gid_t> groups;
  const char* cursor = status_text.data() + at;
  const char* const last = status_text.data() + end;
  while (cursor < last) {
    if (*cursor == ' ' || *cursor == '\t') {
      ++cursor;
      continue;
    }
    gid_t gid = 0;
    const auto [next, error] = std::from_chars(cursor, last, gid);
    if (error != std::errc{}) return {};  // not the kernel's format: trust none of it
    groups.push_back(gid);
    cursor = next;
  }
  return groups;
}

std::vector<gid_t> supplementary_groups(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/status");
  if (!file) return {};
  std::ostringstream text;
  text << file.rdbuf();
  return parse_status_groups(text.str());
}

std::vector<gid_t> peer_groups(int socket_fd, pid_t pid) {
  std::vector<gid_t> groups(64);
  for (int tries = 0; tries < 4; ++tries) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      return groups;
    }
    if (errno != ERANGE) break;
    groups.resize(bytes / sizeof(gid_t) + 1);  // the kernel said how many
  }
  if (errno == ENOPROTOOPT) return supplementary_groups(pid);
  return {};  // none counts
}

ClientInfo client_info(const config::Config& config, const ClientIdentity& identity) {
  ClientInfo info;
  info.client = identity.id;
  info.job = identity.job;
  info.priority = identity.priority;
  // The Hello's device is 0 from every shim (it registers before it knows a context), and an
  // ordinal is its process's own numbering anyway: on no device until its first GPU op.
  info.device = ClientInfo::kNoDevice;
  if (const config::JobConfig* entry = config::find_job(config, identity.job)) {
    if (entry->target_ms) info.target_ns = static_cast<std::int64_t>(*entry->target_ms * 1e6);
    info.percentile = entry->percentile;
    info.weight = entry->weight;
    if (entry->safety_margin_ms) info.safety_margin_ns = static_cast<std::int64_t>(*entry->safety_margin_ms * 1e6);
  }
  return info;
}

std::string describe_targets(const ClientInfo& info) {
  const auto number = [](double value) {
    std::ostringstream text;
    text << value;
    return text.str();
  };
  std::string text = info.target_ns ? "target " + number(static_cast<double>(*info.target_ns) / 1e6) + " ms at p" +
                                          number(info.percentile)
                                    : std::string("no target");
  text += ", weight " + number(info.weight);
  if (info.safety_margin_ns) text += ", safety margin " + number(static_cast<double>(*info.safety_margin_ns) / 1e6) + " ms";
  return text;
}

}  // namespace gpuqos::scheduler
