// gpuqosd: accepting connections, the first record (Hello or ControlRequest), registration of a
// client (its segment and reply), control answers, and the kernel names clients send afterwards.
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon_tokens.h"
#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/client_access.h"
#include "gpuqos/scheduler/daemon.h"

namespace gpuqos::scheduler {
namespace {

// The random end of a segment's name (ipc::segment_name): a user test squatted the names that
// followed, and every job after was refused ("File exists").
std::uint64_t segment_nonce() {
  std::uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof nonce)) {
    nonce = static_cast<std::uint64_t>(ipc::monotonic_ns()) * 0x9e3779b97f4a7c15ull;  // no entropy yet: unforeseen enough
  }
  return nonce;
}

// A send that failed because the peer had closed its end: it gave up waiting for the answer.
bool peer_stopped_waiting(const ipc::Status& sent) {
  return sent.error().find(std::strerror(EPIPE)) != std::string::npos ||
         sent.error().find(std::strerror(ECONNRESET)) != std::string::npos;
}

}  // namespace

void Daemon::accept_connections() {
  // At most kAcceptsPerPass, then back to the loop (the listener, level-triggered, wakes it again):
  // a re-test's flood of connections kept the queue full, this loop never ran out of them, and
  // gpuqosd's heartbeat stopped for the ten seconds the flood lasted, its jobs unmanaged.
  for (int accepted = 0; accepted < kAcceptsPerPass; ++accepted) {
    FileDescriptor socket(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!socket.valid()) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays queued and the listener readable: stop watching it for a while.
        spdlog::warn("accept: {}: not accepting connections for {} ms", std::strerror(errno),
                     kAcceptPauseNs / 1'000'000);
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
        accept_paused_until_ns_ = ipc::monotonic_ns() + kAcceptPauseNs;
        return;
      }
      spdlog::warn("accept: {}", std::strerror(errno));
      return;
    }
    auto peer = ipc::peer_credentials(socket.get());
    const std::int64_t now_ns = ipc::monotonic_ns();
    if (!peer) {
      if (may_warn_of_peer(now_ns, static_cast<uid_t>(-1))) spdlog::warn("connection without peer credentials: {}", peer.error());
      continue;
    }
    const bool over_cap = connections_of(peer->uid) >= connection_cap_;
    if (over_cap && std::cmp_greater_equal(std::count_if(pending_.begin(), pending_.end(),
                                                         [](const auto& entry) { return entry.second.over_cap; }),
                                           kOverCapPending)) {
      warn_over_cap(peer.value(), now_ns);
      continue;  // closed: its shim runs unmanaged and asks again later
    }
    const std::uint64_t token = tokens::kPendingBase + next_pending_token_++;
    watch(socket.get(), token, EPOLLIN | EPOLLRDHUP);
    pending_.emplace(token, Pending{std::move(socket), peer.value(), now_ns, over_cap});
  }
}

void Daemon::on_pending_readable(std::uint64_t token, std::uint32_t events) {
  auto it = pending_.find(token);
  if (it == pending_.end()) return;
  std::vector<std::byte> record;
  std::string error;
  switch (read_record_nonblocking(it->second.socket.get(), record, ipc::kMaxRecordBytes, error)) {
    case ReadOutcome::record: on_first_record(it->second, record); break;
    case ReadOutcome::would_block:
      if ((events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) == 0) return;  // wait for it
      [[fallthrough]];
    case ReadOutcome::closed: spdlog::debug("pid {} closed before registering", it->second.peer.pid); break;
    case ReadOutcome::error:
      if (may_warn_of_peer(ipc::monotonic_ns(), it->second.peer.uid)) {
        spdlog::warn("pid {}: bad first record: {}", it->second.peer.pid, error);
      }
      break;
  }
  pending_.erase(token);  // registered clients moved their socket out; everything else closes here
}

void Daemon::warn_over_cap(const ipc::PeerCredentials& peer, std::int64_t now_ns) {
  if (!may_warn_of_peer(now_ns, peer.uid)) return;
  spdlog::warn("pid {} uid {}: refused: the user has {} connections to gpuqosd, the most one user may hold "
               "(a job of that many processes, or a user flooding the socket; --max-connections-per-user)",
               peer.pid, peer.uid, connection_cap_);
}

void Daemon::on_first_record(Pending& pending, const std::vector<std::byte>& record) {
  const pid_t pid = pending.peer.pid;
  const ipc::RecordKind kind = ipc::record_kind(record);
  if (pending.over_cap && kind != ipc::RecordKind::control_request) {
    return warn_over_cap(pending.peer, ipc::monotonic_ns());  // closed: as at the accept, past kOverCapPending
  }
  switch (kind) {
    case ipc::RecordKind::control_request: return answer_control(pending, record);
    case ipc::RecordKind::hello: break;
    default:
      if (!may_warn_of_peer(ipc::monotonic_ns(), pending.peer.uid)) return;
      return spdlog::warn("pid {}: garbage instead of a hello ({} bytes): connection closed", pid, record.size());
  }
  auto decoded = ipc::decode_hello(record);
  if (!decoded) {
    if (!may_warn_of_peer(ipc::monotonic_ns(), pending.peer.uid)) return;
    return spdlog::warn("pid {}: garbage hello: {}: connection closed", pid, decoded.error());
  }
  if (!decoded->version_matches) {
    if (may_warn_of_peer(ipc::monotonic_ns(), pending.peer.uid)) {
      spdlog::warn("pid {}: protocol version {}.{}, this daemon speaks {}.{}: refused", pid,
                   decoded->hello.version_major, decoded->hello.version_minor, ipc::kProtocolVersionMajor,
                   ipc::kProtocolVersionMinor);
    }
    auto reply = ipc::make_hello_reply(ipc::HelloStatus::version_mismatch, 0, "",
                                       "gpuqosd speaks protocol " + std::to_string(ipc::kProtocolVersionMajor) + "." +
                                           std::to_string(ipc::kProtocolVersionMinor),
                                       ipc::Priority::low, 0);
    [[maybe_unused]] auto sent = ipc::send_record(pending.socket.get(), ipc::encode(reply));
    return;
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, pending.socket.get(), nullptr);
  register_client(pending, decoded->hello);
}

void Daemon::register_client(Pending& pending, const ipc::Hello& hello) {
  status_changed();  // what a status made earlier showed changes
  if (stopping_) return;
  // Numbers wrap after 2^32 registrations (a loop of them gets there in days): one still in use
  // (a client's epoll tokens, its segment's name, the policy's state of it) is never given twice.
  ClientId id = next_client_number_++;
  while (id == 0 || clients_.contains(id)) id = next_client_number_++;
  const ipc::PeerCredentials& peer = pending.peer;
  // The shim sends only names of the job-name rule; another client may send any printable bytes,
  // which the tables, the log and [[job]] entries cannot carry (a user test's 'sp ace=1,y="2"\\'
  // ran into the status table's columns): made a job name as the shim would make it.
  const std::string job = ipc::sanitize_job_name(hello.job_name);
  if (job != hello.job_name && may_warn_of_peer(ipc::monotonic_ns(), peer.uid)) {
    spdlog::warn("pid {} uid {}: job name {:?} is not 1 to 63 of A-Z a-z 0-9 . _ -: registered as '{}'", peer.pid,
                 peer.uid, std::string_view(hello.job_name), job);
  }
  // The groups count only for a high claim: those of connect time, as the uid and gid are
  // (/proc/PID/status, read here, could be another process's by now: the pid of one that handed
  // its socket on and exited).
  const std::vector<gid_t> groups = hello.priority == ipc::Priority::high ? peer_groups(pending.socket.get(), peer.pid)
                                                                          : std::vector<gid_t>{};
  const PriorityDecision decision = decide_priority(options_.config, job, hello.priority, peer, groups);
  if (!decision.why_lowered.empty() && may_warn_of_peer(ipc::monotonic_ns(), peer.uid)) {  // a loop of claims is a flood too
    const char* old_shim = " (its shim speaks protocol 1.0 and cannot be told: it will not wait for grants)";
    spdlog::warn("job '{}' pid {} uid {}: claims high priority, but {}: runs as low priority{}", job, peer.pid,
                 peer.uid, decision.why_lowered, hello.version_minor < 1 ? old_shim : "");
  }
  // A shim of 1.10 or later is passed its segment as a sealed memfd: it maps it whatever /dev/shm it
  // sees (a container's own), and no one can truncate it under its mapping. An older one opens a
  // named segment in /dev/shm.
  const bool passed_segment = hello.version_minor >= 10;
  const std::string name = ipc::segment_name(static_cast<std::uint32_t>(::getpid()), id, segment_nonce());
  auto segment = passed_segment ? ipc::Segment::create_sealed(name, peer.uid, static_cast<std::uint32_t>(peer.pid))
                                : ipc::Segment::create(name, peer.uid, static_cast<std::uint32_t>(peer.pid));
  if (!segment) {
    if (may_warn_of_peer(ipc::monotonic_ns(), peer.uid)) spdlog::error("job '{}' pid {}: {}", job, peer.pid, segment.error());
    auto reply = ipc::make_hello_reply(ipc::HelloStatus::refused, 0, "", "gpuqosd cannot create a segment",
                                       ipc::Priority::low, 0);
    [[maybe_unused]] auto sent = ipc::send_record(pending.socket.get(), ipc::encode(reply));
    return;
  }
  // The chunk size lives in [policy.baymax] but is sent whatever the policy: the shim splits
  // low-priority copies by it and knows nothing of policy names. The devices the config lists are
  // the ones the shim posts work of; it issues the others' straight to the driver.
  static_assert(config::kMaxDeviceUuids == ipc::kMaxManagedUuids);
  const auto& [ordinals, uuids] = options_.config.devices;
  std::uint64_t managed = ordinals.empty() && uuids.empty() ? ipc::kAllDevices : ipc::device_mask(ordinals);
  // A shim older than 1.8 cannot read GPUs named by UUID: it would post none of their work, and a
  // high-priority job there would run unprotected. A 1.7 shim is sent every device instead (its ops
  // say their UUIDs, so gpuqosd keeps each GPU apart): that only costs grants on the others. An
  // older one's ops say no UUID, so they would be filed by ordinal, maybe under another GPU's
  // number: it keeps the ordinals, and the GPUs named by UUID run unscheduled for it.
  if (!uuids.empty() && hello.version_minor < 8) {
    const bool says_uuids = hello.version_minor >= 7;
    // Once per registration: within a budget, as a loop of Hellos is a flood.
    if (client_notes_.take(ipc::monotonic_ns(), peer.uid)) {
      spdlog::warn("job '{}' pid {}: its shim (protocol 1.{}) cannot take [devices] uuids: {}", job, peer.pid,
                   hello.version_minor,
                   says_uuids ? "it posts the work of every device"
                              : "the GPUs they name run unscheduled for it (upgrade the shim with gpuqosd)");
    }
    if (says_uuids) managed = ipc::kAllDevices;
  }
  auto reply = ipc::make_hello_reply(ipc::HelloStatus::ok, id, name, "", decision.effective,
                                     options_.policy.baymax.copy_chunk_bytes, managed);
  if (ipc::Status named = ipc::set_managed_uuids(reply, uuids); !named) {  // the config checked them
    spdlog::error("job '{}' pid {}: {}; it posts the work of every device", job, peer.pid, named.error());
    reply.managed_devices = ipc::kAllDevices;
  }
  // A shim of 1.6 or later rings its rings' doorbell and the loop pops its ops ring; an older one's
  // ring gets an OpsWaiter thread. The doorbell is a datagram socket pair, the shim holding one end:
  // each end is a file of its own, so a client cannot make the loop's end block (an eventfd's
  // O_NONBLOCK is shared with whoever holds it). No pair (out of descriptors): a thread, as for an
  // older shim.
  int ends[2] = {-1, -1};
  if (hello.version_minor >= 6) {
    [[maybe_unused]] const int made = ::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, ends);
  }
  FileDescriptor doorbell(ends[0]);
  const FileDescriptor shim_end(ends[1]);  // ours closes once sent
  const FileDescriptor segment_end(segment->take_descriptor());  // likewise (a passed segment's)
  std::vector<int> passed;
  if (segment_end.valid()) passed.push_back(segment_end.get());
  if (doorbell.valid()) passed.push_back(shim_end.get());
  const std::vector<std::byte> encoded = ipc::encode(reply);
  if (ipc::Status sent = passed.empty() ? ipc::send_record(pending.socket.get(), encoded)
                                        : ipc::send_record(pending.socket.get(), encoded, passed);
      !sent) {
    // A shim gives up on its Hello after a second (a stalled loop answers later): not a fault.
    if (!peer_stopped_waiting(sent)) {
      spdlog::warn("job '{}' pid {}: cannot answer its hello: {}", job, peer.pid, sent.error());
    } else if (late_answers_.take(ipc::monotonic_ns(), peer.uid)) {
      spdlog::info("job '{}' pid {}: its shim stopped waiting for the answer to its hello; it runs unmanaged until "
                   "it registers again",
                   job, peer.pid);
    }
    if (!passed_segment) ipc::Segment::remove(name);  // a passed one's name is only a label
    return;
  }
  ClientIdentity identity{id, peer, job, decision.effective, hello.device, hello.priority};
  std::unique_ptr<Client> client;
  try {  // its OpsWaiter is a thread: out of threads, this client is refused, not the daemon stopped
    client = std::make_unique<Client>(std::move(identity), std::move(pending.socket), std::move(segment.value()),
                                      wake_.get(), std::move(doorbell));
  } catch (const std::exception& e) {
    spdlog::warn("job '{}' pid {}: cannot serve it: {}", job, peer.pid, e.what());
    if (!passed_segment) ipc::Segment::remove(name);  // a passed one's name is only a label
    return;
  }
  watch(client->socket_fd(), id, EPOLLIN | EPOLLRDHUP);
  if (client->pidfd() >= 0) watch(client->pidfd(), tokens::kPidfdBase + id, EPOLLIN);
  if (client->doorbell_fd() >= 0) watch(client->doorbell_fd(), tokens::kDoorbellBase + id, EPOLLIN);
  const ClientInfo info = client_info(options_.config, client->identity());
  // No device: the shim registers before it knows one (its work names them; status lists them).
  if (client_lines_.take(ipc::monotonic_ns(), peer.uid)) {
    spdlog::info("{}: registered as client {} (uid {}, {} priority, {}, segment {})", client->tag(), id, peer.uid,
                 decision.effective == ipc::Priority::high ? "high" : "low", describe_targets(info), name);
  }
  warn_if_target_unprotected(client->identity(), info, &client_notes_);
  warn_if_high_unlisted(client->identity(), info, client_notes_);
  learner_->client_user(id, peer.uid);
  clients_.emplace(id, std::move(client));
  apply(policy_->client_registered(info, ipc::monotonic_ns()));
}

// Under baymax, a job that runs high priority under a name no [[job]] of the config file lists has
// no latency target: its work is never held, but no best-effort work is held for its queries either,
// and nothing said so (a user test: a typo in GPUQOS_JOB ran the latency-critical job unprotected).
// Once a job: not while another high-priority process of it is connected. Not said of a listed job
// without a target (a choice), without a config file, or under fifo and priority, which use no
// targets (priority holds best-effort work for any high-priority work).
void Daemon::warn_if_high_unlisted(const ClientIdentity& identity, const ClientInfo& info, LogBudget& budget) {
  if (info.priority != ipc::Priority::high || info.target_ns || options_.config_path.empty() ||
      policy_->name() != "baymax" || config::find_job(options_.config, identity.job)) {
    return;
  }
  const bool seen = std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    return entry.second->identity().job == identity.job && entry.second->high_priority();
  });
  if (seen || !budget.take(ipc::monotonic_ns(), identity.peer.uid)) return;
  spdlog::warn("job '{}' pid {}: runs high priority, but no [[job]] of the config is named '{}'{}: with no latency "
               "target, best-effort work is not held for its queries",
               identity.job, identity.peer.pid, identity.job, config::did_you_mean_job(options_.config, identity.job));
}

// A job the config gives a latency target that runs low priority (it did not claim high: a missing
// `--priority high`, a bad GPUQOS_PRIORITY) is neither protected nor measured against its target,
// and nothing else says so (a refused claim is warned of where it is refused). Not while a process
// of the job runs high: its low ones are helpers of a protected job.
bool Daemon::warn_if_target_unprotected(const ClientIdentity& identity, const ClientInfo& info, LogBudget* budget) {
  if (info.priority != ipc::Priority::low || !info.target_ns || identity.claimed_priority != ipc::Priority::low) {
    return false;
  }
  const bool protected_job = std::any_of(clients_.begin(), clients_.end(), [&](const auto& entry) {
    return entry.second->identity().job == identity.job && entry.second->high_priority();
  });
  if (protected_job || (budget != nullptr && !budget->take(ipc::monotonic_ns(), identity.peer.uid))) return false;
  spdlog::warn("job '{}' pid {}: runs as low priority, but the config gives it a latency target ({}): its work waits "
               "like best-effort work and its queries are not measured against the target; start it with "
               "GPUQOS_PRIORITY=high (gpuqos run --priority high)",
               identity.job, identity.peer.pid, describe_targets(info));
  return true;
}

bool Daemon::status_may_be_made(std::int64_t now_ns) {
  if (status_budget_at_ns_ != 0 && now_ns > status_budget_at_ns_) {
    status_budget_ns_ = std::min(kStatusBudgetMaxNs, status_budget_ns_ + (now_ns - status_budget_at_ns_) / kStatusShare);
  }
  status_budget_at_ns_ = std::max(status_budget_at_ns_, now_ns);
  return status_budget_ns_ > 0;
}

void Daemon::answer_control(Pending& pending, const std::vector<std::byte>& record) {
  auto decoded = ipc::decode_control_request(record);
  if (!decoded) {
    if (!may_warn_of_peer(ipc::monotonic_ns(), pending.peer.uid)) return;
    return spdlog::warn("pid {}: garbage control request: {}", pending.peer.pid, decoded.error());
  }
  ipc::ControlStatus status = ipc::ControlStatus::ok;
  std::string text;
  if (!decoded->version_matches) {
    status = ipc::ControlStatus::version_mismatch;
    text = "gpuqosd speaks protocol " + std::to_string(ipc::kProtocolVersionMajor);
  } else if (decoded->request.kind != ipc::ControlKind::status) {
    status = ipc::ControlStatus::unknown_kind;
    text = "unknown control request " + std::to_string(static_cast<std::uint32_t>(decoded->request.kind));
  } else {
    // Made once a pass at most, however many ask in it (a review queued 64 at once, an epoll batch,
    // for a 300-ms stall of the loop), and within a share of the loop's time (pass_status_text_).
    if (!pass_status_text_) {
      drain_all(ipc::monotonic_ns());  // count what has arrived
      const std::int64_t began_ns = ipc::monotonic_ns();
      pass_status_text_ = bounded_status_text(status_snapshot());
      // In debt by at most a full budget, or the one status's cost if more: a stall in the making
      // does not freeze the answer for long, and one that costs more than a budget is still made
      // within its share (a review: capped at one budget, a 200-ms status was made every 500 ms).
      const std::int64_t cost = ipc::monotonic_ns() - began_ns;
      status_budget_ns_ = std::max(status_budget_ns_ - cost, -std::max(kStatusBudgetMaxNs, cost));
    }
    text = *pass_status_text_;
  }
  auto reply = ipc::encode_control_reply(status, text);
  if (!reply) return spdlog::error("pid {}: {}", pending.peer.pid, reply.error());
  if (ipc::Status sent = ipc::send_record(pending.socket.get(), reply.value()); !sent) {
    if (!peer_stopped_waiting(sent)) {
      spdlog::warn("pid {}: cannot send status: {}", pending.peer.pid, sent.error());
    } else if (late_answers_.take(ipc::monotonic_ns(), pending.peer.uid)) {
      spdlog::info("pid {}: its status request stopped waiting for the answer", pending.peer.pid);
    }
  }
}

std::string Daemon::read_client_socket(Client& client, std::optional<std::uint32_t> until_kernel) {
  std::vector<std::byte> record;
  std::string error;
  if (client.records_pass != loop_pass_) {
    client.records_pass = loop_pass_;
    client.records_read = 0;
  }
  // An op of a kernel not named yet may read a few records past the pass's budget: a shim sends
  // each name just before the kernel's first op, and a pass may take a client's ops more than once
  // (a timer, a wake, a status request, the doorbell), so its names must not wait for the next pass
  // (a review: from the 257th new kernel in one pass, ops were learned under kernel-<id>).
  int past_budget = 0;
  for (;; ++client.records_read) {
    if (until_kernel && client.kernel_names().contains(*until_kernel)) return {};
    if (client.records_read >= kRecordsPerRead && (!until_kernel || past_budget++ >= kRecordsPerLookup)) return {};
    switch (read_record_nonblocking(client.socket_fd(), record, ipc::kMaxRecordBytes, error)) {
      case ReadOutcome::would_block: return {};
      case ReadOutcome::closed: return {};  // the hang-up event follows
      case ReadOutcome::error: return "socket: " + error;
      case ReadOutcome::record: break;
    }
    if (ipc::record_kind(record) == ipc::RecordKind::unscheduled_device) {
      if (std::string why = note_unscheduled_device(client, record); !why.empty()) return why;
      continue;
    }
    auto name = ipc::decode_kernel_name(record);
    if (!name) return "bad record on its socket: " + name.error();
    spdlog::debug("{}: kernel {} is {}", client.tag(), name->kernel_id, name->name);
    if (std::string why = add_kernel_name(client, name->kernel_id, std::move(name->name)); !why.empty()) return why;
  }
  return {};
}

std::string Daemon::add_kernel_name(Client& client, std::uint32_t id, std::string name) {
  auto& names = client.kernel_names();
  const auto existing = names.find(id);
  if (existing == names.end() && names.size() >= kMaxKernelNames) {
    return "more than " + std::to_string(kMaxKernelNames) + " kernel names";
  }
  // Each name costs its bytes and its entry's (a review: 65,536 one-byte names were counted 64 KiB
  // and took about 5 MiB).
  const auto cost = [](const std::string& text) { return text.size() + kKernelNameEntryBytes; };
  const std::size_t replaced = existing == names.end() ? 0 : cost(*existing->second);
  std::size_t& user = kernel_name_bytes_by_user_[client.identity().peer.uid];
  if (client.kernel_name_bytes - replaced + cost(name) > kMaxKernelNameBytesPerClient) {
    return "kernel names over " + std::to_string(kMaxKernelNameBytesPerClient >> 20) + " MiB";
  }
  if (user - replaced + cost(name) > kMaxKernelNameBytesPerUser) {
    return "its user's clients' kernel names over " + std::to_string(kMaxKernelNameBytesPerUser >> 20) + " MiB";
  }
  client.kernel_name_bytes = client.kernel_name_bytes - replaced + cost(name);
  user = user - replaced + cost(name);
  names[id] = std::make_shared<const std::string>(std::move(name));
  return {};
}

std::string Daemon::note_unscheduled_device(Client& client, const std::vector<std::byte>& record) {
  auto device = ipc::decode_unscheduled_device(record);
  if (!device) return "bad record on its socket: " + device.error();
  auto& unscheduled = client.unscheduled_devices();
  DeviceTable::Uuid uuid;
  std::copy(std::begin(device->uuid), std::end(device->uuid), uuid.begin());
  if (unscheduled.contains(device->ordinal)) return {};  // said again: the first stands
  if (unscheduled.size() >= DeviceTable::kMaxGpusPerClient) {
    // For the status only: a node with more GPUs than that must not cost the job its scheduling.
    if (!std::exchange(client.unscheduled_capped, true)) {
      spdlog::info("{} says more than {} unscheduled GPUs: the status lists the first {}", client.tag(),
                   DeviceTable::kMaxGpusPerClient, DeviceTable::kMaxGpusPerClient);
    }
    return {};
  }
  unscheduled.emplace(device->ordinal, uuid);
  // Within a budget: up to 16 a registration, and a loop of them is a flood.
  if (client_notes_.take(ipc::monotonic_ns(), client.identity().peer.uid)) {
    spdlog::info("{} runs its device {} ({}) unscheduled: [devices] does not name it", client.tag(), device->ordinal,
                 uuid == DeviceTable::Uuid{} ? std::string("its driver cannot say its UUID") : DeviceTable::uuid_text(uuid));
  }
  return {};
}

std::size_t Daemon::connection_cap_for(std::uint64_t descriptor_limit) {
  constexpr std::uint64_t kReserved = 64;  // the listener, epoll, signalfd, metrics, the store...
  constexpr std::uint64_t kPerClient = 3;  // socket, doorbell, pidfd
  const std::uint64_t usable = descriptor_limit > kReserved ? descriptor_limit - kReserved : 0;
  return std::clamp<std::size_t>(static_cast<std::size_t>(usable / kPerClient / 4), kMinConnectionsPerUser,
                                 kMaxConnectionsPerUser);
}

std::size_t Daemon::connections_of(uid_t uid) const {
  const auto pending = std::count_if(pending_.begin(), pending_.end(), [uid](const auto& entry) {
    return entry.second.peer.uid == uid && !entry.second.over_cap;
  });
  const auto registered = std::count_if(clients_.begin(), clients_.end(), [uid](const auto& entry) {
    return entry.second->identity().peer.uid == uid;
  });
  return static_cast<std::size_t>(pending + registered);
}

bool Daemon::LogBudget::take(std::int64_t now_ns, uid_t uid) {
  roll(now_ns);
  const bool new_user = !users.contains(uid) && users.size() < kUsersPerWindow;
  if (said < per_window || new_user) {
    ++said;
    users.insert(uid);
    return true;
  }
  ++unsaid;
  return false;
}

void Daemon::LogBudget::roll(std::int64_t now_ns, bool last) {
  if (!last && now_ns - window_start_ns < kPeerWarningWindowNs) return;
  if (unsaid > 0) {
    spdlog::log(not_a_fault ? spdlog::level::info : spdlog::level::warn, "{} more {} in the last {:.1f} s were not logged: {}",
                unsaid, what, static_cast<double>(now_ns - window_start_ns) / 1e9, why);
  }
  window_start_ns = now_ns;
  said = 0;
  unsaid = 0;
  users.clear();
}

void Daemon::expire_pending(std::int64_t now_ns) {
  // One line per connection, but a flood of them (a scanner, a client in a reconnect loop) is one
  // line per sweep, not thousands; and every line is within the peer warnings' budget (a review: a
  // few silent connections every 10 ms made a line or three each sweep, 100 a second).
  constexpr std::size_t kSaidOneByOne = 3;
  std::vector<std::int64_t> pids;
  std::vector<uid_t> uids;
  std::erase_if(pending_, [now_ns, &pids, &uids](const auto& entry) {
    if (now_ns - entry.second.accepted_ns < kFirstRecordTimeoutNs) return false;
    pids.push_back(entry.second.peer.pid);
    uids.push_back(entry.second.peer.uid);
    return true;
  });
  const auto within = kFirstRecordTimeoutNs / 1'000'000;
  if (pids.size() <= kSaidOneByOne) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (!may_warn_of_peer(now_ns, uids[i])) continue;
      spdlog::warn("pid {}: sent nothing within {} ms of connecting: closed", pids[i], within);
    }
    return;
  }
  if (!may_warn_of_peer(now_ns, uids.front())) return;
  const std::size_t closed = pids.size();
  std::sort(pids.begin(), pids.end());  // one process's many connections: its pid once
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  if (pids.size() > kSaidOneByOne) pids.resize(kSaidOneByOne);
  spdlog::warn("{} connections sent nothing within {} ms of connecting: closed (pids {}, ...)", closed, within,
               fmt::join(pids, ", "));
}

}  // namespace gpuqos::scheduler
