// Status: the jobs (query latencies against targets, best-effort progress) and grant counters, as
// JSON and as the part of the table `gpuqos status` and `gpuqos top` print.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "gpuqos/scheduler/status.h"

namespace gpuqos::scheduler {
namespace {

// ns as milliseconds rounded to the microsecond: short JSON, no false precision.
double ms(std::int64_t ns) { return std::round(static_cast<double>(ns) / 1e3) / 1e3; }
// value with `decimals` digits after the point (as near as a double gets: 0.4321, not 0.43210000000000004).
double rounded(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(value * scale) / scale;
}

// object[key], a count (json_integer: a float out of range is refused, not cast).
std::uint64_t count_at(const nlohmann::json& object, const char* key) {
  return json_integer<std::uint64_t>(object.at(key), key);
}

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

// "3.9" for 3.9 ms, "0.412" below a millisecond, "125" from 100 ms on.
std::string short_ms(double value_ms) {
  return format(value_ms >= 100 ? "%.0f" : value_ms >= 1 ? "%.1f" : "%.3f", value_ms);
}

// "ok    p99 3.9 ms / target 6.0 ms  (2 over, 0.13%)", "OVER  p99 ...", "no target", "p99 - / target
// 6.0 ms". The verdict first: a terminal narrower than the row (127 columns with a violation count)
// cuts its end, and `gpuqos top` on 100 columns showed "p99 7.9 ms / target " (a user test).
std::string latency_verdict(const nlohmann::json& job) {
  if (job.at("target_ms").is_null()) return "no target";
  const std::string at = "p" + format("%g", job.at("percentile").get<double>());
  const std::string target = "target " + short_ms(job.at("target_ms").get<double>()) + " ms";
  if (count_at(job, "queries") == 0) return at + " - / " + target;
  std::string text = std::string(job.at("meets_target").get<bool>() ? "ok  " : "OVER") + "  " + at + " " +
                     short_ms(job.at("percentile_ms").get<double>()) + " ms / " + target;
  const auto violations = count_at(job, "violations");
  if (violations > 0) {
    text += "  (" + std::to_string(violations) + " over, " +
            format("%.2f", 100 * job.at("violation_fraction").get<double>()) + "%)";
  }
  return text;
}

// The latency verdict, and the queries that never closed, if any (a daemon before 2026-12-01 does
// not say them).
std::string verdict(const nlohmann::json& job) {
  const auto abandoned = job.contains("abandoned_queries") ? count_at(job, "abandoned_queries") : 0;
  return latency_verdict(job) + (abandoned > 0 ? "  (" + std::to_string(abandoned) + " abandoned)" : "");
}

// `marked`: the jobs gpuqosd says mark their requests' arrivals (baymax's policy state).
void query_rows(const nlohmann::json& jobs, const std::vector<std::string>& marked, std::ostringstream& out) {
  char line[320];
  bool header = false;
  const int width = job_column_width(jobs);
  // The shown jobs, by what their latencies run from: first GPU op, begin mark, arrival.
  std::array<std::string, 3> measured;
  for (const auto& job : jobs) {
    if (job.at("priority") != "high" && count_at(job, "queries") == 0) continue;
    const std::string name = job.at("job").get<std::string>();
    // How its latencies were measured (a daemon older than this field: whether it says arrivals now).
    const std::string from = job.contains("latency_from") && job.at("latency_from").is_string()
                                 ? job.at("latency_from").get<std::string>()
                             : std::find(marked.begin(), marked.end(), name) != marked.end() ? "arrival"
                                                                                             : "first_op";
    std::string& kind = measured[from == "arrival" ? 2 : from == "begin" ? 1 : 0];
    kind += (kind.empty() ? "" : ", ") + name;
    if (!header) {
      std::snprintf(line, sizeof line, "%-*s %-4s %8s %9s %9s %9s %9s  %s\n", width, "JOB", "PRIO", "QUERIES", "P50_MS",
                    "P90_MS", "P99_MS", "P999_MS", "QOS");
      out << line;
      header = true;
    }
    std::snprintf(line, sizeof line, "%-*s %-4s %8llu %9.3f %9.3f %9.3f %9.3f  %s\n", width,
                  job.at("job").get<std::string>().c_str(), job.at("priority").get<std::string>().c_str(),
                  static_cast<unsigned long long>(count_at(job, "queries")),
                  job.at("p50_ms").get<double>(), job.at("p90_ms").get<double>(), job.at("p99_ms").get<double>(),
                  job.at("p999_ms").get<double>(), verdict(job).c_str());
    out << line;
  }
  // What the latencies are, so they are not read as the clients' own (which include the time a
  // request waits in the program's queue before its first GPU op, unless the job says its arrivals).
  if (!header) return;
  static constexpr std::array<const char*, 3> kSpans = {
      "from each query's first GPU op to the synchronisation that drains it",
      "from each query's gpuqos_query_begin() to its gpuqos_query_end()",
      "from each request's arrival (the job says it) to its gpuqos_query_end()"};
  const auto kinds = std::count_if(measured.begin(), measured.end(), [](const std::string& s) { return !s.empty(); });
  out << "  latency:";
  const char* separator = " ";
  for (std::size_t i = 0; i < measured.size(); ++i) {
    if (measured[i].empty()) continue;
    out << separator << kSpans[i];
    if (kinds > 1) out << " for " << measured[i];
    separator = "; ";
  }
  out << "\n";
}

nlohmann::json reasons_json(const HoldTimes& times) {
  nlohmann::json by_reason = nlohmann::json::object();
  for (std::size_t i = 0; i < kHoldReasons; ++i) by_reason[std::string(kHoldReasonNames[i])] = times[i];
  return by_reason;
}

// The reasons that held anything, in their order, from a "held_ns_by_reason" object in `parent`;
// none when it is absent (an older daemon, or a policy that does not say).
std::vector<std::pair<std::string_view, double>> held_reasons(const nlohmann::json& parent) {
  std::vector<std::pair<std::string_view, double>> reasons;
  const auto by_reason = parent.find("held_ns_by_reason");
  if (by_reason == parent.end() || !by_reason->is_object()) return reasons;
  for (std::string_view name : kHoldReasonNames) {  // in the reasons' order, not the object's
    const auto ns = by_reason->find(std::string(name));
    if (ns != by_reason->end() && ns->is_number() && ns->get<double>() > 0) reasons.emplace_back(name, ns->get<double>());
  }
  return reasons;
}

// "deadline 2.3 s": the reason that held the job longest, "-" when none did or the daemon did not say.
std::string top_reason(const nlohmann::json& be) {
  const auto reasons = held_reasons(be);
  const auto top = std::max_element(reasons.begin(), reasons.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  if (top == reasons.end()) return "-";
  char text[64];
  std::snprintf(text, sizeof text, "%s %.1f s", std::string(top->first).c_str(), top->second / 1e9);
  return text;
}

void best_effort_rows(const nlohmann::json& jobs, std::ostringstream& out) {
  char line[256];
  bool header = false;
  const int width = job_column_width(jobs);
  for (const auto& job : jobs) {
    const auto& be = job.at("be");
    if (job.at("priority") != "low" && count_at(be, "ops") == 0) continue;
    if (!header) {
      std::snprintf(line, sizeof line, "%-*s %-4s %6s %10s %12s %10s %7s  %s\n", width, "JOB", "PRIO", "WEIGHT", "OPS",
                    "DEVICE_MS", "OPS/S", "BUSY", "HELD_MOST_BY");
      out << line;
      header = true;
    }
    // A high job here has best-effort ops too: processes of both classes under one name (two
    // programs that took their executable's name, say). The ops are its low processes'.
    const std::string priority = job.at("priority") == "high" ? "both" : "low";
    // The config's weight (a daemon older than the field: "-").
    const auto weight = job.find("weight");
    const std::string weight_text =
        weight != job.end() && weight->is_number() ? format("%.3g", weight->get<double>()) : std::string("-");
    std::snprintf(line, sizeof line, "%-*s %-4s %6s %10llu %12.3f %10.1f %6.1f%%  %s\n", width,
                  job.at("job").get<std::string>().c_str(), priority.c_str(), weight_text.c_str(),
                  static_cast<unsigned long long>(count_at(be, "ops")),
                  be.at("device_ms").get<double>(), be.at("ops_per_s").get<double>(),
                  100 * be.at("busy_share").get<double>(), top_reason(be).c_str());
    out << line;
  }
}

}  // namespace

int job_column_width(const nlohmann::json& rows) {
  std::size_t width = 16;
  for (const auto& row : rows) {
    if (const auto job = row.find("job"); job != row.end() && job->is_string()) {
      width = std::max(width, job->get_ref<const std::string&>().size());
    }
  }
  return static_cast<int>(std::min<std::size_t>(width, 63));
}

nlohmann::json job_json(const JobQosSnapshot& job) {
  const auto optional = [](const auto& value, auto convert) {
    return value ? nlohmann::json(convert(*value)) : nlohmann::json(nullptr);
  };
  nlohmann::json json = {{"job", job.job},
                         {"priority", job.priority == ipc::Priority::high ? "high" : "low"},
                         {"clients", job.clients},
                         {"target_ms", optional(job.target_ns, ms)},
                         {"percentile", job.percentile},
                         {"weight", job.weight},
                         {"queries", job.queries},
                         {"abandoned_queries", job.abandoned},
                         {"latency_from", latency_from_name(job.latency_from)},
                         {"mean_ms", ms(job.mean_ns)},
                         {"p50_ms", ms(job.p50_ns)},
                         {"p90_ms", ms(job.p90_ns)},
                         {"p99_ms", ms(job.p99_ns)},
                         {"p999_ms", ms(job.p999_ns)},
                         {"max_ms", ms(job.max_ns)},
                         {"percentile_ms", ms(job.at_percentile_ns)},
                         {"violations", job.violations},
                         {"violation_fraction", rounded(job.violation_fraction, 6)},
                         {"meets_target", optional(job.meets_target, [](bool meets) { return meets; })},
                         {"idle_s", rounded(static_cast<double>(job.idle_ns) / 1e9, 3)},
                         {"be",
                          {{"ops", job.be_ops},
                           {"device_ms", ms(job.be_device_ns)},
                           {"ops_per_s", rounded(job.be_ops_per_s, 3)},
                           {"busy_share", rounded(job.be_busy_share, 4)}}}};
  if (job.be_held_ns_by_reason) json["be"]["held_ns_by_reason"] = reasons_json(*job.be_held_ns_by_reason);
  if (job.be_outstanding_ns) json["be"]["outstanding_ns"] = *job.be_outstanding_ns;
  return json;
}

nlohmann::json grants_json(const GrantCounters& grants) {
  nlohmann::json json = {{"issued", grants.grants},
                         {"ops_held", grants.ops_held},
                         {"held_wait_ns_total", grants.held_wait_ns_total},
                         {"held_wait_ns_max", grants.held_wait_ns_max}};
  if (grants.held_ns_by_reason) json["held_ns_by_reason"] = reasons_json(*grants.held_ns_by_reason);
  return json;
}

std::string render_jobs_table(const nlohmann::json& status) {
  std::ostringstream out;
  if (status.contains("grants")) {
    const auto& grants = status.at("grants");
    out << "  grants: " << grants.at("issued") << " issued, " << grants.at("ops_held") << " ops waited for a grant, "
        << short_ms(ms(json_integer<std::int64_t>(grants.at("held_wait_ns_total"), "held_wait_ns_total")))
        << " ms in all, at most "
        << short_ms(ms(json_integer<std::int64_t>(grants.at("held_wait_ns_max"), "held_wait_ns_max"))) << " ms\n";
    std::string line;
    for (const auto& [name, ns] : held_reasons(grants)) {
      line += (line.empty() ? "" : ", ") + std::string(name) + " " + short_ms(ns / 1e6) + " ms";
    }
    if (!line.empty()) out << "  held by: " << line << "\n";
  }
  if (!status.contains("jobs")) return out.str();  // a daemon of JSON version 1
  std::vector<std::string> marked;  // (absent from another policy, or an older daemon)
  if (const auto state = status.find("policy_state"); state != status.end() && state->is_object()) {
    for (const auto& job : state->value("marked_jobs", nlohmann::json::array())) {
      if (job.is_object() && job.contains("job") && job.at("job").is_string()) marked.push_back(job.at("job").get<std::string>());
    }
  }
  query_rows(status.at("jobs"), marked, out);
  best_effort_rows(status.at("jobs"), out);
  if (status.contains("jobs_omitted")) out << "(" << status["jobs_omitted"] << " more jobs not shown)\n";
  return out.str();
}

}  // namespace gpuqos::scheduler
