// gpuqosd: feeding the QoS tracker (queries of high-priority jobs, progress of best-effort ones),
// its part of the status, and the Prometheus endpoint that shows it.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/daemon.h"
#include "gpuqos/scheduler/metrics.h"
#include "gpuqos/scheduler/status.h"

namespace gpuqos::scheduler {
namespace {

// A query still open this long after its latest op, or that lost a completion (a shim that stopped
// reporting them), is abandoned: counted apart, not in the latencies. So are those of a client
// that leaves mid-query. Inferred work the program never synchronised on is dropped uncounted:
// it was no request (QueryTracker::unfinished_queries).
constexpr std::int64_t kAbandonQueryNs = 60'000'000'000;
constexpr std::int64_t kTightCheckIntervalNs = 1'000'000'000;  // TightTargetWatch counts checks

}  // namespace

void Daemon::qos_query_closed(const Client& client, const ClosedQuery& query, std::int64_t now_ns) {
  const ClientIdentity& who = client.identity();
  const std::optional<std::int64_t> target = QosTracker::target_of(options_.config, who.job);
  const LatencyFrom from = query.from_arrival ? LatencyFrom::arrival
                           : query.marked     ? LatencyFrom::begin
                                              : LatencyFrom::first_op;
  const QosTracker::StartedOver over = qos_.query_closed(who.id, query.latency_ns(), target, now_ns, from);
  if (over.left_out) {
    spdlog::debug("{}: a query measured from {} left out: the latencies of job '{}' run from {}", client.tag(),
                  latency_from_name(from), who.job, latency_from_name(over.from));
  } else if (over.back_to_first_op) {
    spdlog::info("{}: no process of job '{}' marks its queries now: its latencies count from each query's first "
                 "op again{}",
                 client.tag(), who.job,
                 over.dropped > 0 ? fmt::format(", and the {} marked queries before are left out of its percentiles",
                                                over.dropped)
                                  : std::string());
  } else if (over.dropped > 0 && over.target_changed) {
    log_target_changed(who.job, target, over);
  } else if (over.dropped > 0) {
    spdlog::info("{}: {} from now on: the latencies of job '{}' count from {}, and the {} queries measured otherwise "
                 "before are left out of its percentiles",
                 client.tag(),
                 over.from == LatencyFrom::arrival ? "says its requests' arrivals" : "marks its queries",
                 who.job, over.from == LatencyFrom::arrival ? "them" : "each gpuqos_query_begin()", over.dropped);
  }
}

void Daemon::log_target_changed(const std::string& job, std::optional<std::int64_t> target,
                                const QosTracker::StartedOver& over) const {
  const auto text = [](const std::optional<std::int64_t>& ns) {
    return ns ? fmt::format("{} ms", static_cast<double>(*ns) / 1e6) : std::string("none");
  };
  spdlog::info("the target of job '{}' is {} (was {}): its latencies and violations start over, the {} queries measured "
               "against the old target are left out",
               job, text(target), text(over.old_target_ns), over.dropped);
}

void Daemon::qos_posted(const Client& client, const ipc::OpDescriptor& op, std::int64_t now_ns) {
  const ClientIdentity& who = client.identity();
  qos_.client_seen(who.id, who.job, who.priority, now_ns);
  if (!client.high_priority()) return;
  // Said at its first mark, not at its first marked query's end: a restarted server's first query
  // is still open when a process of its job that does not mark closes one (a review).
  if (op.kind == ipc::OpKind::query_begin || op.kind == ipc::OpKind::query_arrived) qos_.client_marks(who.id, now_ns);
  for (const ClosedQuery& query : queries_.posted(who.id, op, now_ns)) qos_query_closed(client, query, now_ns);
}

void Daemon::qos_completed(const Client& client, const ipc::CompletionDescriptor& completion, std::int64_t now_ns) {
  const ClientIdentity& who = client.identity();
  if (!client.high_priority()) return qos_.work_completed(who.id, completion, now_ns);
  for (const ClosedQuery& query : queries_.completed(who.id, completion, now_ns)) qos_query_closed(client, query, now_ns);
}

void Daemon::qos_client_gone(const Client& client) {
  const std::int64_t now_ns = ipc::monotonic_ns();
  if (const std::uint64_t open = queries_.client_gone(client.identity().id); open > 0) {
    qos_.query_abandoned(client.identity().id, now_ns, open);
  }
  qos_.client_left(client.identity().id, client.grant_counters(), now_ns);
}

void Daemon::qos_tick(std::int64_t now_ns) {
  for (const AbandonedQueries& gone : queries_.expire(now_ns, kAbandonQueryNs)) {
    qos_.query_abandoned(gone.client, now_ns, gone.queries);
    auto client = clients_.find(gone.client);
    if (client != clients_.end()) {
      spdlog::info("{}: {} open for over {} s with nothing posted, or waiting on a completion that never came, "
                   "abandoned (counted, not in the latencies)",
                   client->second->tag(), gone.queries == 1 ? std::string("a query") : fmt::format("{} queries", gone.queries),
                   kAbandonQueryNs / 1'000'000'000);
    }
  }
  const config::ListenAddress& wanted = options_.config.daemon.metrics_listen;
  if (metrics_ && wanted == metrics_address_) {  // a reload back to the address served: nothing failing now
    metrics_error_.clear();
    metrics_failed_ = {};
  }
  if ((wanted != metrics_address_ || (!metrics_ && wanted.enabled())) && now_ns >= metrics_retry_ns_) {
    start_metrics(now_ns);  // a reload moved it, or its port was taken
  }
  if (metrics_ && metrics_->refresh_wanted()) metrics_->publish(render_metrics(status_snapshot()), now_ns);
  warn_tight_targets(now_ns);
}

void Daemon::warn_tight_targets(std::int64_t now_ns) {
  if (now_ns - tight_checked_ns_ < kTightCheckIntervalNs) return;
  tight_checked_ns_ = now_ns;
  const std::optional<PolicyState> state = policy_->state(now_ns);
  if (!state) return;
  std::vector<TightTargetWatch::Key> keys;
  for (const PolicyState::TightTarget& tight : state->tight_targets) keys.emplace_back(tight.job, tight.device);
  for (const TightTargetWatch::Key& key : tight_watch_.check(keys)) {
    const auto tight = std::find_if(state->tight_targets.begin(), state->tight_targets.end(),
                                    [&](const auto& t) { return t.job == key.first && t.device == key.second; });
    if (!tight_warned_
             .emplace(tight->job, tight->device, tight->target_ns, tight->timeslice_ns,
                      tight->backlog_bound_ns > 0 ? 0 : tight->be_processes,  // a run-to-end device: not counted
                      tight->backlog_bound_ns)  // not the wait, which the profile moves
             .second)
      continue;
    spdlog::warn("{}", tight_target_text(*tight));
  }
  for (const std::string& job : state->overdue_jobs) {
    if (!overdue_warned_.insert(job).second) continue;
    spdlog::warn("job '{}': a query has been open for over {} times its target; best-effort work no longer waits for "
                 "it (a gpuqos_query_begin without its end, or a job whose work never drains?)",
                 job, PolicyState::kOverdueTargets);
  }
}

void Daemon::qos_status(DaemonStatus& status, std::int64_t now_ns) const {
  status.jobs = qos_.snapshot(options_.config, now_ns);
  status.grants = qos_.departed_counters();
  for (const auto& [id, client] : clients_) status.grants += client->grant_counters();
  status.grants.held_ns_by_reason = policy_->hold_times();
  status.policy_state = policy_->state(now_ns);
  const auto by_job = status.grants.held_ns_by_reason ? policy_->hold_times_by_job() : std::map<std::string, HoldTimes>{};
  static const std::map<std::string, std::int64_t> kNone;
  const auto& outstanding = status.policy_state ? status.policy_state->be_compute_outstanding_ns : kNone;
  for (JobQosSnapshot& job : status.jobs) {
    const auto held = by_job.find(job.job);
    const auto granted = outstanding.find(job.job);
    // A job with a high-priority process has best-effort work too when another process of its name
    // runs low: what the policy says of that is its.
    const bool best_effort = job.priority == ipc::Priority::low || job.be_ops > 0 || held != by_job.end() ||
                             granted != outstanding.end();
    if (!best_effort) continue;
    if (status.grants.held_ns_by_reason) job.be_held_ns_by_reason = held == by_job.end() ? HoldTimes{} : held->second;
    if (status.policy_state) job.be_outstanding_ns = granted == outstanding.end() ? 0 : granted->second;
  }
}

void Daemon::start_metrics(std::int64_t now_ns) {
  const config::ListenAddress wanted = options_.config.daemon.metrics_listen;
  if (!wanted.enabled()) {
    stop_metrics(/*wait_ns=*/0);
    metrics_address_ = wanted;
    metrics_failed_ = {};
    metrics_error_.clear();
    return;
  }
  auto server = MetricsServer::start(wanted);
  if (!server && metrics_ && metrics_address_.port == wanted.port && metrics_failed_ != wanted) {
    // The endpoint serving holds the port itself (0.0.0.0:P, then 127.0.0.1:P): only then is it
    // stopped to make room, and started again if that was not it (once per address: no flapping).
    const config::ListenAddress serving = metrics_address_;
    stop_metrics(/*wait_ns=*/0);
    server = MetricsServer::start(wanted);
    if (!server) {
      if (auto back = MetricsServer::start(serving)) {
        metrics_ = std::move(back.value());
        spdlog::info("metrics: serving http://{}/metrics again", config::to_string(serving));
      } else {
        spdlog::error("metrics: {} cannot be served again either: {}", config::to_string(serving), back.error());
      }
    }
  }
  if (!server) {
    // Retried, quietly after the first time: the port may be freed (a restart racing the old one).
    metrics_retry_ns_ = now_ns + kMetricsRetryNs;
    metrics_error_ = server.error();
    if (metrics_failed_ != wanted) {
      metrics_failed_ = wanted;
      spdlog::error("metrics: {}; {} (trying again every {} s)", server.error(),
                    metrics_ ? "still serving http://" + config::to_string(metrics_address_) + "/metrics"
                             : std::string("running without the metrics endpoint"),
                    kMetricsRetryNs / 1'000'000'000);
    }
    if (!metrics_) metrics_address_ = {};
    return;
  }
  stop_metrics(/*wait_ns=*/0);
  metrics_ = std::move(server.value());
  metrics_address_ = wanted;
  metrics_failed_ = {};
  metrics_error_.clear();
  spdlog::info("metrics: serving http://{}/metrics", config::to_string(metrics_address_));
}

void Daemon::publish_last_metrics() {
  if (metrics_) metrics_->publish(render_metrics(status_snapshot()), ipc::monotonic_ns());
}

void Daemon::stop_metrics(std::int64_t wait_ns) {
  if (!metrics_) return;
  metrics_->stop(wait_ns);
  metrics_.reset();
  spdlog::info("metrics: stopped serving {}", config::to_string(metrics_address_));
}

}  // namespace gpuqos::scheduler
