// What the config says about a registering client: the class it may run as (a high-priority claim
// the config does not allow runs as low, so one job cannot take the device from the ones it is
// meant to protect) and what the policy is told about its job (target, percentile, weight).
//
// Pure except supplementary_groups(), which reads /proc. Used by the daemon's loop thread at
// registration and when a reloaded config re-tells the policy about connected clients.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpuqos/config/config.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/scheduler/client.h"
#include "gpuqos/scheduler/policy.h"

namespace gpuqos::scheduler {

struct PriorityDecision {
  ipc::Priority effective = ipc::Priority::low;
  std::string why_lowered;  // empty: the claim stands
};

// The class a client claiming `claimed` runs as: the claim, lowered to low when the job's [[job]]
// entry says allowed_priority = "low", or when [access] does not let the peer (uid, primary gid,
// supplementary gids) run high priority. Never raises a claim.
PriorityDecision decide_priority(const config::Config& config, std::string_view job, ipc::Priority claimed,
                                 const ipc::PeerCredentials& peer, std::span<const gid_t> supplementary_gids);

// The gids on the "Groups:" line of a /proc/PID/status text (empty when there is none or it is
// malformed: then no supplementary group counts).
std::vector<gid_t> parse_status_groups(std::string_view status_text);

// The supplementary groups of process `pid`, from /proc/PID/status; none if it cannot be read
// (the process is gone, or lives in another pid namespace).
std::vector<gid_t> supplementary_groups(pid_t pid);

// The supplementary groups of the peer of a connected AF_UNIX socket as they were when it connected
// (SO_PEERGROUPS, as SO_PEERCRED's uid and gid): never another process's that got its pid since.
// A kernel without SO_PEERGROUPS (before 4.13): supplementary_groups(pid).
std::vector<gid_t> peer_groups(int socket_fd, pid_t pid);

// What the policy is told of a registered client: who it is and its effective class, with its
// job's target (target_ms in ns), percentile and weight from the config (the defaults of an
// unlisted job: no target, p99, weight 1).
ClientInfo client_info(const config::Config& config, const ClientIdentity& identity);

// "target 20 ms at p99, weight 1" or "no target, weight 1": for log lines.
std::string describe_targets(const ClientInfo& info);

}  // namespace gpuqos::scheduler
