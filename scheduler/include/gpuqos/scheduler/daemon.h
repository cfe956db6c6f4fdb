// gpuqosd's loop: one epoll thread for the listening socket, the client sockets, a signalfd
// (SIGTERM/SIGINT: drain and exit; SIGHUP: reload the config file), a 10 ms timerfd (heartbeats,
// completions, policy ticks) and the eventfd the clients' OpsWaiter threads signal when ops arrive.
// With [daemon] metrics_listen, the metrics server has threads of its own; they only read the text
// the loop publishes (metrics_server.h).
//
// Contract: create() must run before any other thread exists (it blocks SIGTERM, SIGINT and SIGHUP
// for the process so the signalfd receives them); run() is called once, from that same thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gpuqos/config/config.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/ipc/result.h"
#include "gpuqos/scheduler/client.h"
#include "gpuqos/scheduler/device_table.h"
#include "gpuqos/scheduler/duration_learner.h"
#include "gpuqos/scheduler/metrics_server.h"
#include "gpuqos/scheduler/policy.h"
#include "gpuqos/scheduler/qos_tracker.h"
#include "gpuqos/scheduler/query_tracker.h"
#include "gpuqos/scheduler/status.h"
#include "gpuqos/scheduler/unix_socket.h"

namespace gpuqos::scheduler {

// What gpuqosd's command line set explicitly. It wins over the config file, at start and at every
// reload (SIGHUP), so a reload never undoes an option the operator typed.
struct CommandLineOverrides {
  std::optional<std::string> socket_path;
  std::optional<std::string> policy_name;
  std::optional<std::uint32_t> max_outstanding_ops;
  std::optional<std::uint32_t> credit_ops;
  std::optional<std::string> store_path;
  std::optional<std::int64_t> save_interval_ns;
  std::optional<std::string> log_level;  // trace, debug, info, warn, error, off
  std::optional<config::ListenAddress> metrics_listen;  // --metrics-listen: [daemon] metrics_listen
};

struct DaemonOptions {
  std::string socket_path = kDefaultSocketPath;
  PolicyOptions policy;
  DurationLearner::Options learning;  // the predictor's store and how often it is saved
  // The whole config (jobs, access); the defaults when gpuqosd runs without a file.
  config::Config config = config::default_config();
  std::string config_path;  // empty: no file (then there is nothing to reload)
  std::string log_level = "info";  // spdlog's level: the config's [daemon] log_level, or --log-level
  CommandLineOverrides command_line;
  // --max-connections-per-user: 0 is Daemon::connection_cap_for of the descriptor limit.
  std::uint32_t max_connections_per_user = 0;
};

// Puts options.command_line's values over the rest of options.
void apply_command_line(DaemonOptions& options);
// Makes the socket and profile store paths absolute (against the working directory); apply_command_line
// does it last.
void make_paths_absolute(DaemonOptions& options);

class Daemon {
 public:
  // How often heartbeats are published and the policy ticks (the shim's limit is 100 ms).
  static constexpr std::int64_t kTickNs = 10'000'000;
  // A connection that sends neither a hello nor a control request within this is closed.
  static constexpr std::int64_t kFirstRecordTimeoutNs = 2'000'000'000;
  // Completions read from one client in one pass of the loop, and the time one pass may spend on
  // completions before it leaves the remaining clients' for the next (which starts with them): each
  // costs the learner and the policy some 15 us, and four clients flooding them (an audit) made
  // 105-ms passes, so every shim took gpuqosd for gone. An honest busy client completes some 15 ops
  // in a 10-ms tick.
  static constexpr std::size_t kCompletionsPerPass = 256;
  static constexpr std::int64_t kCompletionPassBudgetNs = 5'000'000;
  // Likewise ops: at most this many from one client in one pass, and this many in all, taken in
  // turns (an op costs the predictor and the policy about as much; ops that arrived at once from
  // four clients also made a pass of over 100 ms). A shim's query or a training step's burst posts
  // far fewer between two passes.
  static constexpr std::size_t kOpsPerPass = 256;
  static constexpr std::size_t kOpsPerPassInAll = 1024;
  // A completion whose op has not arrived within this is a protocol violation.
  static constexpr std::int64_t kDeferredCompletionLimitNs = 1'000'000'000;
  // A low-priority client with more ops and marks waiting for their grants than this posts without
  // waiting for them (a shim holds one per waiting thread): it is disconnected before it grows the
  // daemon's memory without bound.
  static constexpr std::size_t kMaxUngrantedOps = 65536;
  // And GPU ops waiting for their grants over all of one user's clients: the policy keeps about
  // 240 bytes of each, and one user may hold hundreds of connections (a review: 512 of them at the
  // per-client limit held 8 GiB). A client is checked each time its own count has grown by
  // kUngrantedUserCheckEvery since its last check, so the user's total stays within this and that
  // much more per client.
  static constexpr std::size_t kMaxUngrantedOpsPerUser = 4 * kMaxUngrantedOps;
  static constexpr std::size_t kUngrantedUserCheckEvery = 1024;
  // Marks are posted without waiting (a thread looping on cuStreamSynchronize, a server's arrivals)
  // and wait for the grant of the op before them: a far larger bound, with GPU ops, on their sum.
  static constexpr std::size_t kMaxUngrantedPosts = 1 << 20;
  // Kernel names one client may register; beyond, it is disconnected (each name is up to 4 KiB).
  static constexpr std::size_t kMaxKernelNames = 65536;
  // And bytes of kernel names: per client, and per user over all their clients. A re-test sent
  // 65,536 names of 4,000 bytes on each of several connections (each within the count): 1.45 GB of
  // the root daemon's memory from one user, who may hold hundreds of connections. A real program's
  // names (thousands, a few hundred bytes each) take a few MiB.
  static constexpr std::size_t kMaxKernelNameBytesPerClient = 32u << 20;
  // What a name costs besides its bytes: its map entry, its shared string's block and heap block.
  static constexpr std::size_t kKernelNameEntryBytes = 128;
  static constexpr std::size_t kMaxKernelNameBytesPerUser = 128u << 20;
  // Out of descriptors (EMFILE and the like), the listener is not watched for this long: it stays
  // readable, so watching it would spin the loop.
  static constexpr std::int64_t kAcceptPauseNs = 100'000'000;
  // Connections accepted in one pass of the loop before it serves everything else again.
  static constexpr int kAcceptsPerPass = 64;
  // Connections one user (uid) may hold, registered or not: a user test opened 7,000 from one
  // account, gpuqosd ran out of descriptors, and no other user's job could register. At most
  // kMaxConnectionsPerUser (far more than the CUDA processes of any job), and at most a quarter of
  // the descriptors gpuqosd may open (a client holds three: its socket, doorbell and pidfd), at
  // least kMinConnectionsPerUser. Beyond it a connection may still ask for the status (it is
  // answered and closed in one pass, and holds nothing): up to kOverCapPending such connections,
  // of all users, wait for their first record, and one that is not a control request is closed
  // (a review: a user at the cap could not run `gpuqos status`, which read "Connection reset by
  // peer"); past those a connection is closed at once.
  static constexpr std::size_t kMaxConnectionsPerUser = 512;
  static constexpr std::size_t kMinConnectionsPerUser = 8;
  static constexpr std::size_t kOverCapPending = 8;
  static std::size_t connection_cap_for(std::uint64_t descriptor_limit);
  // What a connection's peer makes gpuqosd warn of before it registers (garbage, a refusal, the
  // limit above) is said at most kPeerWarningsPerWindow times a window; the rest are counted and
  // said in one line: a user test wrote 200,000 lines (20 MB) in 3 s by connecting and closing.
  static constexpr int kPeerWarningsPerWindow = 20;
  static constexpr std::int64_t kPeerWarningWindowNs = 10'000'000'000;

  static ipc::Result<std::unique_ptr<Daemon>> create(DaemonOptions options);
  ~Daemon();

  // Serves until SIGTERM or SIGINT, then drains; the process exit code.
  int run();

 private:
  struct Pending {  // connected, first record not yet read
    FileDescriptor socket;
    ipc::PeerCredentials peer;
    std::int64_t accepted_ns = 0;
    bool over_cap = false;  // its user held connection_cap_ then: only a control request is answered
  };

  explicit Daemon(DaemonOptions options);
  ipc::Status setup();
  std::optional<std::string> lock_store();
  void log_target_changed(const std::string& job, std::optional<std::int64_t> target,
                          const QosTracker::StartedOver& over) const;
  void watch(int fd, std::uint64_t token, std::uint32_t events);
  void on_event(std::uint64_t token, std::uint32_t events);

  // daemon_connections.cpp: accepting, first records, control requests, kernel names.
  void accept_connections();
  void on_pending_readable(std::uint64_t token, std::uint32_t events);
  void on_first_record(Pending& pending, const std::vector<std::byte>& record);
  void register_client(Pending& pending, const ipc::Hello& hello);
  void answer_control(Pending& pending, const std::vector<std::byte>& record);
  // Reads the records queued on the client's socket, at most kRecordsPerRead a pass of the loop
  // over all its calls (the socket stays readable for the next pass: a client whose processes refill
  // it as fast as it is read must not hold the loop past the shims' heartbeat limit, as a review's
  // did for 2 s, nor by posting ops of kernels it never names), and with `until_kernel` only until
  // that kernel's name came, then at most kRecordsPerLookup past that budget; why the client must
  // go, or empty.
  static constexpr int kRecordsPerRead = 256;
  static constexpr int kRecordsPerLookup = 4;
  std::string read_client_socket(Client& client, std::optional<std::uint32_t> until_kernel = std::nullopt);
  void expire_pending(std::int64_t now_ns);

  // daemon_clients.cpp: ops, completions, grants, reclaim, drain.
  void drain_all(std::int64_t now_ns);
  // Each returns why the client must go, or an empty string.
  std::string accept_op(Client& client, const ArrivedOp& arrived);
  // The op renumbered to gpuqosd's devices (device_table.h); why the client must go, or empty.
  std::string renumber_device(const Client& client, ipc::OpDescriptor& op);
  // An ipc::UnscheduledDevice record: kept for the status, said once in the log. Non-empty: the
  // client is broken (a record that does not decode).
  std::string note_unscheduled_device(Client& client, const std::vector<std::byte>& record);
  // The policy's per-device settings by gpuqosd's device numbers, applied when they changed.
  void apply_device_settings();
  std::vector<ClientId> clients_in_turn(ClientId from) const;
  // Reads at most `most` new completions (beside those waiting for their ops) and accounts them.
  std::string drain_completions(Client& client, std::int64_t now_ns, std::size_t most = kCompletionsPerPass);
  void apply(const Decisions& decisions);
  void settle_departed(Client& client);
  void drop_client(ClientId id, const std::string& reason, bool as_error);
  void heartbeat_and_tick(std::int64_t now_ns);
  // Before the loop sleeps: tells every client that rings a doorbell (protocol 1.6) to ring it for
  // ops, and while ops are held for completions too; true when such a ring holds items already
  // (pushed unrung while the loop was awake: do not sleep).
  bool arm_doorbells();
  void disarm_doorbells();  // awake again: pushes need not ring
  void drain_and_release();
  DaemonStatus status_snapshot() const;
  // The op `client` is held at, described (none when it is not held).
  std::optional<HeldOpStatus> held_op(Client& client) const;
  // Logs each best-effort op held over 5 s, once, and again when it goes: an operator sees what a
  // job waits for, why and for how long.
  void tell_long_holds(std::int64_t now_ns);

  // daemon_reload.cpp: SIGHUP. Reads config_path again; a bad file changes nothing.
  void reload_config();
  void reregister_clients_with_policy(std::int64_t now_ns);

  // daemon_qos.cpp: the QoS tracker's view of every client's ops (queries, latencies, progress).
  void qos_posted(const Client& client, const ipc::OpDescriptor& op, std::int64_t now_ns);
  void qos_completed(const Client& client, const ipc::CompletionDescriptor& completion, std::int64_t now_ns);
  void qos_client_gone(const Client& client);
  // A query closed: into its job's latencies (said when the job's first from an arrival starts them over).
  void qos_query_closed(const Client& client, const ClosedQuery& query, std::int64_t now_ns);
  // Each tick: abandons queries whose completions were lost, publishes metrics a scrape asked for,
  // and restarts the endpoint when a reload moved [daemon] metrics_listen; once a second, warns of
  // each tight target (PolicyState::tight_targets) the first time it is seen.
  void qos_tick(std::int64_t now_ns);
  void warn_tight_targets(std::int64_t now_ns);
  // The jobs and grant counters of status_snapshot().
  void qos_status(DaemonStatus& status, std::int64_t now_ns) const;
  // Serves the Prometheus endpoint at options_.config.daemon.metrics_listen (none when its port is
  // 0), in place of the one serving. A bind failure is logged once per address and tried again
  // every kMetricsRetryNs (qos_tick), the endpoint serving (if any) kept meanwhile.
  void start_metrics(std::int64_t now_ns);
  static constexpr std::int64_t kMetricsRetryNs = 5'000'000'000;
  // wait_ns: how long to let scrapes in progress finish (MetricsServer::stop): 0 on a reload, where
  // the loop must not stall (the shims' heartbeat limit is 100 ms). The scrapes a wait lets finish
  // get the figures published last (drain_and_release publishes them first: publish_last_metrics;
  // this loop, which renders them, is the one waiting).
  void stop_metrics(std::int64_t wait_ns);
  // The figures as they are now, for the scrapes that come while the endpoint stops.
  void publish_last_metrics();

  DaemonOptions options_;
  std::unique_ptr<Policy> policy_;
  DeviceTable devices_;
  // options_.policy with its per-device settings by gpuqosd's device numbers: what the policy has.
  PolicyOptions numbered_policy_;
  // (device, ordinal) whose settings were checked against the ordinal the device takes them from
  // (warned of when they differ); cleared by a reload, or when a device's settings move.
  std::set<std::pair<std::uint32_t, std::uint32_t>> settings_checked_;
  std::unique_ptr<DurationLearner> learner_;
  std::int64_t started_ns_ = 0;
  FileDescriptor epoll_, listener_, signals_, timer_, wake_;
  bool stopping_ = false;
  std::int64_t accept_paused_until_ns_ = 0;  // 0: the listener is watched
  FileDescriptor socket_lock_;               // lock_socket_path's, for the daemon's life
  FileDescriptor store_lock_;                // lock_beside(store): this daemon saves the store
  ConfigStatus config_status_;               // the config file running and its latest reload
  // A reload refused: logged one problem a line, and kept for the status and metrics.
  // `total`: how many problems `error` stands for (its lines, or more when config capped them).
  void reload_failed(const std::string& path, const std::string& error, std::size_t total = 0);
  // The socket file's identity once bound: a tmp cleaner may remove it (check_socket_path serves
  // the path again), or something else take its place (warned of once).
  dev_t socket_device_ = 0;
  ino_t socket_inode_ = 0;
  std::int64_t socket_checked_ns_ = 0;
  bool told_socket_replaced_ = false;
  static constexpr std::int64_t kSocketCheckNs = 500'000'000;
  void check_socket_path(std::int64_t now_ns);
  // Is the lock file at the path still the one socket_lock_ holds? If not, takes it again; false
  // when another process holds it (an error, said once).
  bool hold_socket_lock();
  bool told_lock_lost_ = false;
  void note_socket_identity();
  void unlink_own_socket() const;  // the path, if it is still our socket
  std::int64_t heartbeat_ns_ = 0;            // the last heartbeat_and_tick
  // A loop stall past the shims' heartbeat limit is warned of (tell_stall), at most this often.
  static constexpr std::int64_t kStallTellEveryNs = 10'000'000'000;
  void tell_stall(std::int64_t now_ns);
  std::int64_t stall_told_ns_ = 0;
  std::uint64_t stalls_untold_ = 0;
  ClientId next_completions_client_ = 0;  // where the next pass starts reading completions
  ClientId next_ops_client_ = 0;          // and ops
  std::int64_t longest_work_ns_ = 0;  // the longest pass of the loop between two waits, since the last heartbeat
  bool doorbell_rang_ = false;               // in this batch of events: drain once after it
  std::uint32_t next_client_number_ = 1;
  std::uint64_t next_pending_token_ = 0;
  std::map<std::uint64_t, Pending> pending_;
  std::map<ClientId, std::unique_ptr<Client>> clients_;
  std::size_t connections_of(uid_t uid) const;  // pending (not over the cap) and registered
  void warn_over_cap(const ipc::PeerCredentials& peer, std::int64_t now_ns);
  // Names kernel `id` of `client` within the limits above; why not, or "".
  std::string add_kernel_name(Client& client, std::uint32_t id, std::string name);
  std::map<uid_t, std::size_t> kernel_name_bytes_by_user_;
  std::size_t connection_cap_ = kMaxConnectionsPerUser;  // set at start (connection_cap_for)
  // Lines of one kind said at most `per_window` times a kPeerWarningWindowNs window, and past that
  // the first of each further user (up to kUsersPerWindow of them), so that one user's flood does
  // not hide another's problem; the rest are counted and said in one line at the window's end.
  struct LogBudget {
    static constexpr std::size_t kUsersPerWindow = 100;
    int per_window;
    const char* what;  // "warnings of connections", in the count's line
    const char* why = "a client in a loop, or a user flooding the socket?";  // ends the count's line
    bool not_a_fault = false;  // the count's line at info, not warn
    std::int64_t window_start_ns = 0;
    int said = 0;
    std::uint64_t unsaid = 0;
    std::set<uid_t> users;  // those said of in this window
    bool take(std::int64_t now_ns, uid_t uid);  // false: counted, not to be said
    // A window that ended (or, with `last`, the one gpuqosd stops in): its count said, a new one begun.
    void roll(std::int64_t now_ns, bool last = false);
  };
  LogBudget peer_warnings_{kPeerWarningsPerWindow, "warnings of connections (garbage, refusals)"};
  // A client's registration and disconnection lines (info): a re-test's loop of Hellos wrote 64,000
  // lines (8.9 MB) in 10 s. Generous: a job of hundreds of processes starting is said whole.
  static constexpr int kClientLinesPerWindow = 400;
  LogBudget client_lines_{kClientLinesPerWindow, "registrations and disconnections of clients"};
  // What a registration says beside its own line (each GPU it runs unscheduled, a shim that cannot
  // take the config's UUIDs, a job whose target or listing its claim does not match): a loop of
  // registrations with 16 unscheduled GPUs each wrote 32,000 lines in 0.34 s. A budget of its own,
  // so these neither crowd out the registrations nor are crowded out by them.
  LogBudget client_notes_{kClientLinesPerWindow, "notes of clients' settings (GPUs unscheduled, targets, UUIDs)"};
  // Answers to peers that had stopped waiting for them (a Hello after the shim's second, a status
  // after `gpuqos status` gave up): not a fault, and every shim's retry in a stall adds one (a user
  // test: 17 lines after gpuqosd was stopped for 17 s). The first of a window is said, the rest
  // counted.
  LogBudget late_answers_{1, "answers to peers that had stopped waiting (Hellos, status requests)",
                          "gpuqosd answered late (stalled or stopped?); a shim among them runs unmanaged until it "
                          "registers again",
                          true};
  // The uid of a peer with no credentials: ~0 (no user has it).
  bool may_warn_of_peer(std::int64_t now_ns, uid_t uid) { return peer_warnings_.take(now_ns, uid); }
  // Said within `budget` at a registration (a loop of them is a flood); a reload says them all.
  bool warn_if_target_unprotected(const ClientIdentity& identity, const ClientInfo& info, LogBudget* budget = nullptr);
  void warn_if_high_unlisted(const ClientIdentity& identity, const ClientInfo& info, LogBudget& budget);
  // The status answer (answer_control), made by the first request of a pass that finds none, and
  // dropped when anything it shows may change (a client comes or goes, a reload) and at the next
  // pass, unless making them has used up its share of the loop: a tenth of its time, in a budget of
  // at most kStatusBudgetMaxNs. Then it is answered again until the budget has refilled. One costs
  // about 6 ms with 500 clients, and any local user may ask in a loop (`gpuqos top --interval
  // 0.001`, a script), which made one every pass: a tenth of the loop and more for the status.
  std::optional<std::string> pass_status_text_;
  static constexpr std::int64_t kStatusBudgetMaxNs = 50'000'000;
  static constexpr std::int64_t kStatusShare = 10;  // the budget refills at 1/kStatusShare of the time
  std::int64_t status_budget_ns_ = kStatusBudgetMaxNs;
  std::int64_t status_budget_at_ns_ = 0;  // when the budget was last refilled (0: never)
  // Refills the status budget to now_ns; true if a status may be made anew.
  bool status_may_be_made(std::int64_t now_ns);
  // Something a status shows changed (a client came or went, a reload): the next request makes one
  // anew, within the budget, else once it has refilled (clients that come and go in a loop spent
  // it without end, a follow-up review).
  void status_changed() {
    if (status_budget_ns_ > 0) pass_status_text_.reset();
  }
  std::uint64_t loop_pass_ = 0;  // counts the loop's passes (read_client_socket's budget)
  // `last`: gpuqosd stops, and the counts of its last window are said now rather than lost.
  void tell_unsaid_peer_warnings(std::int64_t now_ns, bool last = false) {
    peer_warnings_.roll(now_ns, last);
    client_lines_.roll(now_ns, last);
    client_notes_.roll(now_ns, last);
    late_answers_.roll(now_ns, last);
  }
  struct ToldHold {  // tell_long_holds(): an op told of as held long, until it goes
    std::uint64_t seq = 0;
    std::string op;
    std::string held_by;  // the reason at the latest look
    std::int64_t since_ns = 0;
    std::uint32_t device = 0;
    std::set<std::string> high_jobs;  // high-priority jobs on its device at the latest look
  };
  // The high-priority jobs with a client that posted GPU work on gpuqosd's device.
  std::set<std::string> high_priority_jobs(std::uint32_t device) const;
  std::map<ClientId, ToldHold> told_holds_;
  QueryTracker queries_;  // the high-priority clients' query boundaries (for the QoS tracker)
  QosTracker qos_;
  config::ListenAddress metrics_address_;  // what metrics_ serves (disabled: none)
  config::ListenAddress metrics_failed_;   // the address last told of as failing (disabled: none)
  std::string metrics_error_;              // why the address asked for is not served ("" when it is)
  std::int64_t metrics_retry_ns_ = 0;
  std::unique_ptr<MetricsServer> metrics_;
  std::int64_t tight_checked_ns_ = 0;
  std::set<std::string> overdue_warned_;  // jobs told of once (PolicyState::overdue_jobs)
  // (job, device, target, slice, best-effort processes, backlog bound) warned of: a reload that
  // changes the target, the slice or the bound warns anew, and so does a further best-effort process
  // that makes a target tight on a time-slicing device (on a run-to-end one they are not counted).
  std::set<std::tuple<std::string, std::uint32_t, std::int64_t, std::int64_t, std::uint32_t, std::int64_t>> tight_warned_;
  TightTargetWatch tight_watch_;  // which tight targets have been tight long enough to log
};

}  // namespace gpuqos::scheduler
