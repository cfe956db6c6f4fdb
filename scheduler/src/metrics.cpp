// render_metrics: a DaemonStatus in the Prometheus text exposition format 0.0.4.
#include "gpuqos/scheduler/metrics.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

namespace gpuqos::scheduler {
namespace {

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }
double seconds(double ns) { return ns / 1e9; }

// Writes one family: its HELP and TYPE lines, then the samples added to it.
class Family {
 public:
  Family(std::ostringstream& out, std::string_view name, std::string_view type, std::string_view help)
      : out_(out), name_(name) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  // One sample: name_ + suffix, labels as name="value" pairs.
  Family& sample(double value, std::initializer_list<std::pair<std::string_view, std::string_view>> labels = {},
                 std::string_view suffix = "") {
    out_ << name_ << suffix;
    if (labels.size() > 0) {
      out_ << '{';
      bool first = true;
      for (const auto& [label, text] : labels) {
        out_ << (first ? "" : ",") << label << "=\"" << escape_label_value(text) << '"';
        first = false;
      }
      out_ << '}';
    }
    out_ << ' ' << format_sample_value(value) << '\n';
    return *this;
  }

 private:
  std::ostringstream& out_;
  std::string name_;
};

// A bound in seconds as plain decimals ("0.0001", "2.5", "10"), as client libraries write `le`.
std::string le_text(std::int64_t ns) {
  std::string fraction = std::to_string(1'000'000'000 + ns % 1'000'000'000).substr(1);
  fraction.erase(fraction.find_last_not_of('0') + 1);
  return std::to_string(ns / 1'000'000'000) + (fraction.empty() ? "" : "." + fraction);
}

bool tracks_queries(const JobQosSnapshot& job) { return job.priority == ipc::Priority::high || job.queries > 0; }
bool tracks_progress(const JobQosSnapshot& job) { return job.priority == ipc::Priority::low || job.be_ops > 0; }

void query_families(const DaemonStatus& status, std::ostringstream& out) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Family latency(out, "gpuqos_query_latency_seconds", "summary",
                 "Latency of a high-priority job's queries, first op to the synchronisation that drains them, "
                 "since the daemon started.");
  for (const auto& job : status.jobs) {
    if (!tracks_queries(job)) continue;
    const bool any = job.queries > 0;
    const std::pair<const char*, std::int64_t> quantiles[] = {
        {"0.5", job.p50_ns}, {"0.9", job.p90_ns}, {"0.99", job.p99_ns}, {"0.999", job.p999_ns}};
    for (const auto& [quantile, ns] : quantiles) {
      latency.sample(any ? seconds(ns) : nan, {{"job_name", job.job}, {"quantile", quantile}});
    }
    latency.sample(seconds(job.latency_sum_ns), {{"job_name", job.job}}, "_sum");
    latency.sample(static_cast<double>(job.queries), {{"job_name", job.job}}, "_count");
  }
  Family histogram(out, "gpuqos_query_latency_histogram_seconds", "histogram",
                   "The same latencies counted at fixed bounds: to aggregate across nodes and take histogram_quantile.");
  for (const auto& job : status.jobs) {
    if (!tracks_queries(job)) continue;
    for (std::size_t i = 0; i < job.at_most.size(); ++i) {
      histogram.sample(static_cast<double>(job.at_most[i]),
                       {{"job_name", job.job}, {"le", le_text(LatencyHistogram::kLeBoundsNs[i])}},
                       "_bucket");
    }
    histogram.sample(static_cast<double>(job.queries), {{"job_name", job.job}, {"le", "+Inf"}}, "_bucket");
    histogram.sample(seconds(job.latency_sum_ns), {{"job_name", job.job}}, "_sum");
    histogram.sample(static_cast<double>(job.queries), {{"job_name", job.job}}, "_count");
  }
  Family target(out, "gpuqos_query_target_seconds", "gauge",
                "The job's latency target from the config, at the percentile labelled.");
  for (const auto& job : status.jobs) {
    if (job.target_ns) target.sample(seconds(*job.target_ns), {{"job_name", job.job}, {"percentile", format_sample_value(job.percentile)}});
  }
  Family meets(out, "gpuqos_query_meets_target", "gauge",
               "1 when the job's latency at its target percentile is within the target, else 0.");
  for (const auto& job : status.jobs) {
    if (job.meets_target) meets.sample(*job.meets_target ? 1 : 0, {{"job_name", job.job}});
  }
  Family violations(out, "gpuqos_query_violations_total", "counter", "Queries that took longer than the job's target.");
  for (const auto& job : status.jobs) {
    if (tracks_queries(job)) violations.sample(static_cast<double>(job.violations), {{"job_name", job.job}});
  }
  Family abandoned(out, "gpuqos_query_abandoned_total", "counter",
                   "Queries that never closed (their process left, or gpuqosd gave up on them): not in the latencies.");
  for (const auto& job : status.jobs) {
    // Also a job whose high-priority process left mid-query while a low one of it stays: it is low
    // now, and may have no closed query to show.
    if (tracks_queries(job) || job.abandoned > 0) {
      abandoned.sample(static_cast<double>(job.abandoned), {{"job_name", job.job}});
    }
  }
}

void best_effort_families(const DaemonStatus& status, std::ostringstream& out) {
  Family ops(out, "gpuqos_be_ops_completed_total", "counter", "GPU ops of a best-effort job that ran.");
  for (const auto& job : status.jobs) {
    if (tracks_progress(job)) ops.sample(static_cast<double>(job.be_ops), {{"job_name", job.job}});
  }
  Family device(out, "gpuqos_be_device_seconds_total", "counter",
                "Time a best-effort job's completed ops were in flight (the union of their spans, end - start).");
  for (const auto& job : status.jobs) {
    if (tracks_progress(job)) device.sample(seconds(job.be_device_ns), {{"job_name", job.job}});
  }
  Family busy(out, "gpuqos_be_busy_share", "gauge",
              "A best-effort job's time in flight over wall time in the last 5 s.");
  for (const auto& job : status.jobs) {
    if (tracks_progress(job)) busy.sample(job.be_busy_share, {{"job_name", job.job}});
  }
}

void policy_families(const PolicyState& state, std::ostringstream& out) {
  Family(out, "gpuqos_be_backlog_bound_seconds", "gauge",
         "The bound on granted best-effort compute work now (adaptation moves it).")
      .sample(seconds(state.backlog_bound_ns));
  if (state.idle_stream_bound_ns > 0)
    Family(out, "gpuqos_be_idle_stream_bound_seconds", "gauge",
           "A best-effort stream's bound on a preemptive device while no query is in the system there.")
        .sample(seconds(state.idle_stream_bound_ns));
  Family(out, "gpuqos_be_backlog_bound_steps_total", "counter", "Times adaptation moved the bound.")
      .sample(static_cast<double>(state.adaptation_steps));
  Family budget(out, "gpuqos_long_op_budget_seconds", "gauge",
                "What best-effort ops longer than the bound (the configured one, or the adaptive one when "
                "looser) may still cost on a device that runs kernels to their end (negative: in debt).");
  for (const auto& device : state.long_op_budgets) budget.sample(seconds(device.level_ns), {{"device", std::to_string(device.device)}});
  Family cap(out, "gpuqos_long_op_budget_cap_seconds", "gauge", "The most the long-op budget holds.");
  for (const auto& device : state.long_op_budgets) cap.sample(seconds(device.cap_ns), {{"device", std::to_string(device.device)}});
  Family outstanding(out, "gpuqos_be_outstanding_seconds", "gauge",
                     "Predicted device time of a best-effort job's granted compute work not completed.");
  for (const auto& [job, ns] : state.be_compute_outstanding_ns) outstanding.sample(seconds(ns), {{"job_name", job}});
  Family gap(out, "gpuqos_query_arrival_gap_seconds", "gauge",
             "Mean time between the arrivals a high-priority job marks, over its latest 64 (absent until 8).");
  for (const auto& job : state.marked_jobs) {
    if (job.mean_arrival_gap_ns > 0) gap.sample(seconds(job.mean_arrival_gap_ns), {{"job_name", job.job}});
  }
  Family allowance(out, "gpuqos_query_allowance_seconds", "gauge",
                   "How long past its own time best-effort work may make a query of a job that marks its "
                   "arrivals run (the bound, capped by the job's arrival rate; the margin included).");
  for (const auto& job : state.marked_jobs) allowance.sample(seconds(job.query_allowance_ns), {{"job_name", job.job}});
  Family idle(out, "gpuqos_be_held_while_idle_seconds_total", "counter",
              "Time a device's compute engine had nothing granted in flight while a best-effort compute op was "
              "held there: best-effort throughput the holds cost outright.");
  for (const auto& device : state.idle_held) idle.sample(seconds(device.held_ns), {{"device", std::to_string(device.device)}});
}

void daemon_families(const DaemonStatus& status, std::ostringstream& out) {
  const GrantCounters& g = status.grants;
  Family(out, "gpuqos_grants_total", "counter", "Grant descriptors pushed to clients.")
      .sample(static_cast<double>(g.grants));
  Family(out, "gpuqos_ops_held_total", "counter", "Best-effort GPU ops that had to wait for a grant.")
      .sample(static_cast<double>(g.ops_held));
  Family(out, "gpuqos_grant_wait_seconds_total", "counter", "Time held ops waited, post to grant, in all.")
      .sample(seconds(g.held_wait_ns_total));
  Family(out, "gpuqos_grant_wait_seconds_max", "gauge", "The longest a held op waited for its grant.")
      .sample(seconds(g.held_wait_ns_max));
  if (g.held_ns_by_reason) {
    Family held(out, "gpuqos_be_held_seconds_total", "counter",
                "Time a best-effort job's next op waited for its grant, by the policy's reason.");
    for (const auto& job : status.jobs) {
      if (!job.be_held_ns_by_reason) continue;
      for (std::size_t i = 0; i < kHoldReasons; ++i) {
        held.sample(seconds((*job.be_held_ns_by_reason)[i]),
                    {{"job_name", job.job}, {"reason", std::string(kHoldReasonNames[i])}});
      }
    }
  }
  if (status.policy_state) policy_families(*status.policy_state, out);
  Family device_info(out, "gpuqos_device_info", "gauge",
                     "1 for each GPU gpuqosd has seen work on: which GPU each device label names (gpuqosd's own "
                     "numbers, not each job's ordinals), and the ordinal its first job called it.");
  for (const auto& device : status.devices) {
    device_info.sample(1, {{"device", std::to_string(device.device)}, {"uuid", device.uuid},
                           {"ordinal", std::to_string(device.ordinal)}});
  }
  Family unscheduled(out, "gpuqos_unscheduled_device_clients", "gauge",
                     "Connected clients that run work on a GPU gpuqosd does not schedule ([devices] does not name "
                     "it), by the GPU's UUID (empty when a driver cannot say).");
  std::map<std::string, int> unscheduled_clients;
  for (const auto& client : status.clients) {
    for (const auto& device : client.unscheduled) ++unscheduled_clients[device.uuid];
  }
  for (const auto& [uuid, clients] : unscheduled_clients) unscheduled.sample(clients, {{"uuid", uuid}});
  Family slice(out, "gpuqos_device_timeslice_seconds", "gauge",
               "The time slice gpuqosd counts on for a GPU that time-slices processes' kernels (absent for one "
               "that runs them to their end).");
  for (const auto& device : status.devices) {
    if (device.preemptive) slice.sample(seconds(device.timeslice_ns), {{"device", std::to_string(device.device)}});
  }
  Family backlog(out, "gpuqos_engine_backlog_seconds", "gauge",
                 "Predicted device time of the work accounted on an engine and not completed.");
  for (const auto& load : status.backlog) {
    backlog.sample(seconds(load.backlog_ns), {{"device", std::to_string(load.device)}, {"engine", engine_name(load.engine)}});
  }
  Family outstanding(out, "gpuqos_engine_outstanding_ops", "gauge", "Ops accounted on an engine and not completed.");
  for (const auto& load : status.backlog) {
    outstanding.sample(static_cast<double>(load.outstanding_ops),
                       {{"device", std::to_string(load.device)}, {"engine", engine_name(load.engine)}});
  }
  Family lost(out, "gpuqos_engine_lost_ops_total", "counter",
              "Ops accounted on an engine whose completion had not come 10 s later (retired unmeasured; one that comes after is not counted).");
  for (const auto& load : status.backlog) {
    lost.sample(static_cast<double>(load.lost_ops), {{"device", std::to_string(load.device)}, {"engine", engine_name(load.engine)}});
  }
  std::size_t high = 0;
  for (const auto& client : status.clients) high += client.priority == ipc::Priority::high;
  Family(out, "gpuqos_clients", "gauge", "Connected clients by the priority they run at.")
      .sample(static_cast<double>(high), {{"priority", "high"}})
      .sample(static_cast<double>(status.clients.size() - high), {{"priority", "low"}});
  Family(out, "gpuqos_uptime_seconds", "gauge", "Seconds since gpuqosd started.").sample(seconds(status.uptime_ns));
  if (status.config) {
    Family(out, "gpuqos_config_last_reload_successful", "gauge",
           "Whether the latest reload of the config file (SIGHUP) was applied (1 before any).")
        .sample(status.config->last_reload_ok ? 1 : 0);
    Family(out, "gpuqos_config_last_reload_success_timestamp_seconds", "gauge",
           "When the config running was read (Unix time): at start, or at the last reload applied.")
        .sample(static_cast<double>(status.config->loaded_unix_s));
  }
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (const char c : value) {
    if (c == '\\') {
      escaped += "\\\\";
    } else if (c == '"') {
      escaped += "\\\"";
    } else if (c == '\n') {
      escaped += "\\n";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string format_sample_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);
  return error == std::errc() ? std::string(text, end) : "NaN";
}

std::string render_metrics(const DaemonStatus& status) {
  std::ostringstream out;
  query_families(status, out);
  best_effort_families(status, out);
  daemon_families(status, out);
  return out.str();
}

}  // namespace gpuqos::scheduler
