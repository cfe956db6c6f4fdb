// Status: JSON encoding, the bounded reply text, the table, and the CLI's request.
#include "gpuqos/scheduler/status.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/scheduler/unix_socket.h"

namespace gpuqos::scheduler {
namespace {

constexpr const char* kNoAnswerWithin = "gpuqosd did not answer within ";
constexpr const char* kCannotReach = "cannot reach gpuqosd: ";

// An error of a connection gpuqosd closed without answering, with what that can mean: it closes
// one at once past the connections one user may hold, which read as a bare "Connection reset by
// peer" (a review).
std::string closed_without_an_answer(std::string error) {
  if (error.ends_with("peer closed") || error.ends_with(std::strerror(ECONNRESET)) || error.ends_with(std::strerror(EPIPE))) {
    error += " (gpuqosd closed the connection without an answer: it is stopping, or it refused the connection "
             "because this user holds as many as one user may: gpuqosd --max-connections-per-user)";
  }
  return error;
}

nlohmann::json client_json(const ClientStatus& c) {
  nlohmann::json j = {{"client", c.client},
          {"pid", c.pid},
          {"uid", c.uid},
          {"gid", c.gid},
          {"job", c.job},
          {"priority", c.priority == ipc::Priority::high ? "high" : "low"},
          {"claimed_priority", c.claimed_priority == ipc::Priority::high ? "high" : "low"},
          {"device", c.device},
          {"devices", c.devices},
          {"state", c.state},
          {"segment", c.segment},
          {"ops", {{"posted", c.posted}, {"granted", c.granted}, {"completed", c.completed}}},
          {"marks", {{"sync", c.marks[0]}, {"query_begin", c.marks[1]}, {"query_end", c.marks[2]}, {"query_arrived", c.marks[3]}}},
          {"last_seq", c.last_seq},
          {"granted_through_seq", c.granted_through_seq},
          {"current_wait_ns", c.current_wait_ns},
          {"kernel_names", c.kernel_names}};
  for (const ClientStatus::Unscheduled& u : c.unscheduled) {
    j["unscheduled_devices"].push_back({{"ordinal", u.ordinal}, {"uuid", u.uuid}});
  }
  if (c.held) {
    j["held_at"] = {{"seq", c.held->seq},
                    {"op", c.held->op},
                    {"predicted_ns", c.held->predicted_ns},
                    {"expected_ns", c.held->expected_ns},
                    {"held_by", c.held->held_by}};
  }
  return j;
}

nlohmann::json backlog_json(const EngineLoad& load) {
  return {{"device", load.device},
          {"engine", engine_name(load.engine)},
          {"outstanding_ops", load.outstanding_ops},
          {"backlog_ns", load.backlog_ns},
          {"completed_ops", load.completed_ops},
          {"completed_device_ns", load.completed_device_ns},
          {"lost_ops", load.lost_ops}};
}

nlohmann::json policy_state_json(const PolicyState& state) {
  nlohmann::json budgets = nlohmann::json::array();
  for (const auto& budget : state.long_op_budgets) {
    budgets.push_back({{"device", budget.device},
                       {"level_ns", static_cast<std::int64_t>(budget.level_ns)},
                       {"cap_ns", static_cast<std::int64_t>(budget.cap_ns)}});
  }
  nlohmann::json tight = nlohmann::json::array();
  for (const auto& t : state.tight_targets) {
    nlohmann::json entry{{"job", t.job},
                         {"device", t.device},
                         {"target_ns", t.target_ns},
                         {"expected_query_ns", t.expected_query_ns},
                         {"timeslice_ns", t.timeslice_ns},
                         {"be_processes", t.be_processes}};
    if (t.backlog_bound_ns > 0) {
      entry["backlog_bound_ns"] = t.backlog_bound_ns;
      entry["backlog_wait_ns"] = t.backlog_wait_ns;
      entry["ahead_ns"] = t.ahead_ns;
    }
    tight.push_back(std::move(entry));
  }
  nlohmann::json marked = nlohmann::json::array();
  for (const auto& m : state.marked_jobs) {
    marked.push_back({{"job", m.job},
                      {"mean_arrival_gap_ns", m.mean_arrival_gap_ns},
                      {"query_allowance_ns", m.query_allowance_ns}});
  }
  nlohmann::json idle_held = nlohmann::json::array();
  for (const auto& d : state.idle_held) idle_held.push_back({{"device", d.device}, {"held_ns", d.held_ns}});
  return {{"backlog_bound_ns", state.backlog_bound_ns},
          {"idle_stream_bound_ns", state.idle_stream_bound_ns},
          {"idle_held", std::move(idle_held)},
          {"adaptation_steps", state.adaptation_steps},
          {"long_op_budget", std::move(budgets)},
          {"tight_targets", std::move(tight)},
          {"overdue_jobs", state.overdue_jobs},
          {"marked_jobs", std::move(marked)}};
}

// object[key] as an int64 (json_integer: a float out of range is refused, not cast).
std::int64_t int64_at(const nlohmann::json& object, const char* key) {
  return json_integer<std::int64_t>(object.at(key), key);
}

std::string milliseconds(double ns) {
  char text[64];  // a product of a daemon's figures runs to 29 digits
  std::snprintf(text, sizeof text, "%.3f", ns / 1e6);
  return text;
}
std::string milliseconds(std::int64_t ns) { return milliseconds(static_cast<double>(ns)); }

// How long a daemon has been up, as a person reads it: "42.5 s", "3 min 21 s", "5 h 07 min", "2 d 3 h".
std::string uptime_text(std::int64_t ns) {
  char text[48];
  const std::int64_t s = std::max<std::int64_t>(0, ns) / 1'000'000'000;
  if (s < 60) {
    std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(std::max<std::int64_t>(0, ns)) / 1e9);
  } else if (s < 3600) {
    std::snprintf(text, sizeof text, "%lld min %lld s", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(text, sizeof text, "%lld h %02lld min", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else {
    std::snprintf(text, sizeof text, "%lld d %lld h", static_cast<long long>(s / 86400),
                  static_cast<long long>(s % 86400 / 3600));
  }
  return text;
}

// "2026-11-27 23:59:55" in local time.
std::string local_time_text(std::int64_t unix_s) {
  const std::time_t when = static_cast<std::time_t>(unix_s);
  std::tm local{};
  char text[32] = "?";
  if (::localtime_r(&when, &local) != nullptr) std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

}  // namespace

template <class T>
T json_integer(const nlohmann::json& value, std::string_view name, T min) {
  using Limits = std::numeric_limits<T>;
  if (value.is_number_unsigned()) {
    if (const auto n = value.get<std::uint64_t>(); std::cmp_greater_equal(n, min) && std::cmp_less_equal(n, Limits::max())) {
      return static_cast<T>(n);
    }
  } else if (value.is_number_integer()) {
    if (const auto n = value.get<std::int64_t>(); std::cmp_greater_equal(n, min) && std::cmp_less_equal(n, Limits::max())) {
      return static_cast<T>(n);
    }
  } else if (value.is_number_float()) {
    // T's max + 1 is a power of two, exact as a double (T's max itself is not, for 64 bits).
    const double d = value.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && d >= static_cast<double>(min) && d < std::ldexp(1.0, Limits::digits)) {
      return static_cast<T>(d);
    }
  }
  throw nlohmann::json::type_error::create(
      302, std::string(name) + " is " + value.dump() + ", not an integer from " + std::to_string(min) + " to " +
               std::to_string(Limits::max()), &value);
}

template <class T>
T json_integer_or(const nlohmann::json& object, const char* key, T absent) {
  const auto it = object.find(key);
  return it == object.end() ? absent : json_integer<T>(*it, key);
}

template std::int64_t json_integer(const nlohmann::json&, std::string_view, std::int64_t);
template std::uint64_t json_integer(const nlohmann::json&, std::string_view, std::uint64_t);
template std::uint32_t json_integer(const nlohmann::json&, std::string_view, std::uint32_t);
template std::int64_t json_integer_or(const nlohmann::json&, const char*, std::int64_t);
template std::uint64_t json_integer_or(const nlohmann::json&, const char*, std::uint64_t);
template std::uint32_t json_integer_or(const nlohmann::json&, const char*, std::uint32_t);

namespace {

nlohmann::json daemon_json(const DaemonStatus& status) {
  return {{"pid", status.pid}, {"uptime_ns", status.uptime_ns}, {"policy", status.policy}, {"socket", status.socket}};
}

}  // namespace

nlohmann::json to_json(const DaemonStatus& status) {
  nlohmann::json json = {{"version", 2},
                         {"daemon", daemon_json(status)},
                         {"predictor",
                          {{"store", status.predictor.store},
                           {"kernels", status.predictor.kernels},
                           {"learned", status.predictor.learned},
                           {"coarse", status.predictor.coarse},
                           {"shared", status.predictor.shared},
                           {"unknown", status.predictor.unknown},
                           {"rejected", status.predictor.rejected},
                           {"saves", status.predictor.saves}}},
                         {"backlog", nlohmann::json::array()},
                         {"devices", nlohmann::json::array()},
                         {"clients", nlohmann::json::array()},
                         {"jobs", nlohmann::json::array()},
                         {"grants", grants_json(status.grants)}};
  if (status.config) {
    json["daemon"]["config"] = {{"path", status.config->path},
                                {"loaded_unix_s", status.config->loaded_unix_s},
                                {"last_reload_ok", status.config->last_reload_ok},
                                {"last_reload_unix_s", status.config->last_reload_unix_s},
                                {"last_reload_error", status.config->last_reload_error},
                                {"needs_restart", status.config->needs_restart}};
  }
  if (status.metrics) {
    const auto text_or_null = [](const std::string& text) { return text.empty() ? nlohmann::json() : nlohmann::json(text); };
    json["daemon"]["metrics"] = {{"listen", text_or_null(status.metrics->listen)},
                                 {"serving", text_or_null(status.metrics->serving)},
                                 {"error", text_or_null(status.metrics->error)},
                                 {"retry_s", status.metrics->retry_s}};
  }
  for (const auto& load : status.backlog) json["backlog"].push_back(backlog_json(load));
  for (const auto& d : status.devices) {
    nlohmann::json device{{"device", d.device}, {"uuid", d.uuid}, {"ordinal", d.ordinal}, {"clients", d.clients},
                          {"preemptive", d.preemptive}};
    if (d.preemptive) device["timeslice_ns"] = d.timeslice_ns;
    json["devices"].push_back(std::move(device));
  }
  for (const auto& client : status.clients) json["clients"].push_back(client_json(client));
  for (const auto& job : status.jobs) json["jobs"].push_back(job_json(job));
  if (status.policy_state) json["policy_state"] = policy_state_json(*status.policy_state);
  return json;
}

namespace {

// Invalid UTF-8 (a file path is any bytes) is replaced, not thrown on.
std::string dump(const nlohmann::json& json) { return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

namespace {

// The clients in the order a cut keeps them: high priority first, then each user's first client,
// then each user's second... (in client order within a user). A re-test: one user's 512 clients
// filled the status, and another user's inference client was among the 370 left out.
void order_clients_for_a_cut(nlohmann::json& clients) {
  std::vector<nlohmann::json> high;
  std::map<std::uint64_t, std::vector<nlohmann::json>> by_user;
  for (auto& client : clients) {
    if (client.value("priority", "") == "high") {
      high.push_back(std::move(client));
    } else {
      by_user[client.value("uid", std::uint64_t{0})].push_back(std::move(client));
    }
  }
  nlohmann::json ordered = nlohmann::json::array();
  for (auto& client : high) ordered.push_back(std::move(client));
  for (std::size_t round = 0;; ++round) {
    bool any = false;
    for (auto& [uid, list] : by_user) {
      if (round >= list.size()) continue;
      ordered.push_back(std::move(list[round]));
      any = true;
    }
    if (!any) break;
  }
  clients = std::move(ordered);
}

// The answer when even the cut status does not fit (its strings too long: a reload's error of
// thousands of lines): the daemon's line and the counts, and why there is nothing more. A text
// over the record's limit is not sent at all (encode_control_reply refuses it), and `gpuqos status`
// could only say "peer closed".
std::string status_too_large_text(const DaemonStatus& status, std::size_t bytes, std::size_t max_bytes) {
  nlohmann::json json = {{"version", 2},
                         {"daemon", daemon_json(status)},
                         {"backlog", nlohmann::json::array()},
                         {"clients", nlohmann::json::array()},
                         {"clients_omitted", status.clients.size()},
                         {"jobs", nlohmann::json::array()},
                         {"jobs_omitted", status.jobs.size()},
                         {"truncated", "the status (" + std::to_string(bytes) + " bytes) does not fit one answer (" +
                                           std::to_string(max_bytes) + " bytes): only the daemon's line is shown"}};
  std::string text = dump(json);
  if (text.size() > max_bytes) {  // only with a max_bytes far below the record's (a test's)
    json["daemon"]["socket"] = "";
    json["truncated"] = "the status does not fit one answer";
    text = dump(json);
  }
  return text;
}

}  // namespace

std::string bounded_status_text(const DaemonStatus& status, std::size_t max_bytes) {
  nlohmann::json json = to_json(status);
  std::string text = dump(json);
  if (text.size() <= max_bytes) return text;
  order_clients_for_a_cut(json["clients"]);
  // The lists a cut shortens, each counted in "<name>_omitted" beside it. What each entry takes (with
  // its comma), so the cut is worked out without dumping again: entries come off the end of whichever
  // list takes most room (the earlier one on a tie) until the rest fits. (A review: 520 tight targets
  // did not fit, and only clients and jobs were cut.) Objects are maps: `parent` stays valid while
  // the counts are added.
  struct List {
    nlohmann::json* parent;
    const char* name;
    std::vector<std::size_t> bytes;
    std::size_t total = 0;
    std::size_t kept = 0;
  };
  std::vector<List> lists;
  const auto add = [&](nlohmann::json& parent, const char* name) {
    if (!parent.contains(name)) return;
    List& list = lists.emplace_back(List{&parent, name, {}});
    for (const auto& entry : parent[name]) list.total += list.bytes.emplace_back(dump(entry).size() + 1);
    list.kept = list.bytes.size();
  };
  for (const char* name : {"clients", "jobs", "backlog", "devices"}) add(json, name);
  if (json.contains("policy_state")) {
    for (const char* name : {"tight_targets", "marked_jobs", "overdue_jobs", "idle_held", "long_op_budget"}) {
      add(json["policy_state"], name);
    }
  }
  constexpr std::size_t kOmittedCountBytes = 48;  // ,"long_op_budget_omitted":18446744073709551615
  std::size_t size = text.size() + kOmittedCountBytes * lists.size();
  for (;;) {
    const auto longest = std::max_element(lists.begin(), lists.end(),
                                          [](const List& a, const List& b) { return a.total < b.total; });
    if (size <= max_bytes || longest == lists.end() || longest->kept == 0) break;
    const std::size_t bytes = longest->bytes[--longest->kept];
    longest->total -= bytes;
    size -= bytes;
  }
  for (const List& list : lists) {
    nlohmann::json& entries = (*list.parent)[list.name];
    if (list.kept == entries.size()) continue;
    (*list.parent)[std::string(list.name) + "_omitted"] = entries.size() - list.kept;
    entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(list.kept), entries.end());
  }
  std::string cut = dump(json);
  return cut.size() <= max_bytes ? cut : status_too_large_text(status, text.size(), max_bytes);
}

std::string render_policy_state(const nlohmann::json& status) {
  std::ostringstream out;
  const auto& state = status.at("policy_state");
  out << "  best-effort bound " << milliseconds(int64_at(state, "backlog_bound_ns")) << " ms ("
      << state.at("adaptation_steps") << " adaptation steps)";
  // (Absent from a daemon older than idle_bound_factor.)
  if (const auto idle = json_integer_or(state, "idle_stream_bound_ns", std::int64_t{0}); idle > 0)
    out << ", " << milliseconds(idle) << " ms per stream with no query in the system";
  for (const auto& budget : state.at("long_op_budget")) {
    out << ", device " << budget.at("device") << " long-op budget "
        << milliseconds(int64_at(budget, "level_ns")) << " of " << milliseconds(int64_at(budget, "cap_ns")) << " ms";
  }
  out << "\n";
  std::string granted;
  for (const auto& job : status.value("jobs", nlohmann::json::array())) {
    const auto& be = job.at("be");
    // Only what is outstanding: a job whose work all completed (one that left, too) has nothing here.
    const std::int64_t outstanding_ns = json_integer_or(be, "outstanding_ns", std::int64_t{0});
    if (outstanding_ns <= 0) continue;
    granted += (granted.empty() ? "" : ", ") + job.at("job").get<std::string>() + " " + milliseconds(outstanding_ns) + " ms";
  }
  if (!granted.empty()) out << "  granted, not completed: " << granted << "\n";
  // (Absent from a daemon older than counting it.)
  std::string idle;
  for (const auto& device : state.value("idle_held", nlohmann::json::array())) {
    idle += (idle.empty() ? "" : ", ") + std::string("device ") + device.at("device").dump() + " " +
            milliseconds(int64_at(device, "held_ns")) + " ms";
  }
  if (!idle.empty()) out << "  idle while best-effort compute was held: " << idle << "\n";
  // (Absent from a daemon older than the arrival rate's cap.)
  for (const auto& marked : state.value("marked_jobs", nlohmann::json::array())) {
    const auto gap = int64_at(marked, "mean_arrival_gap_ns");
    out << "  " << marked.at("job").get<std::string>() << " says its arrivals: "
        << (gap > 0 ? "one every " + milliseconds(gap) + " ms (mean of its latest arrivals, at most 64)" : "too few yet for a rate")
        << "; a query may run " << milliseconds(int64_at(marked, "query_allowance_ns"))
        << " ms past its own time (the margin included)\n";
  }
  // (Absent from a daemon older than the check.)
  for (const auto& tight : state.value("tight_targets", nlohmann::json::array())) {
    // be_processes: absent from a daemon older than counting them, which compared one slice. No
    // time of a target is negative: one that is makes no warning worth reading.
    const auto duration = [&](const char* key) { return json_integer<std::int64_t>(tight.at(key), key, 0); };
    const auto duration_or_0 = [&](const char* key) { return tight.contains(key) ? duration(key) : 0; };
    const PolicyState::TightTarget t{tight.at("job").get<std::string>(), json_integer<std::uint32_t>(tight.at("device"), "device"),
                                     duration("target_ns"), duration("expected_query_ns"), duration("timeslice_ns"),
                                     json_integer_or(tight, "be_processes", std::uint32_t{1}),
                                     duration_or_0("backlog_bound_ns"), duration_or_0("backlog_wait_ns"),
                                     duration_or_0("ahead_ns")};
    out << "  warning: " << tight_target_text(t) << "\n";
  }
  // A user test: this was in the JSON and the log only.
  for (const auto& job : state.value("overdue_jobs", nlohmann::json::array())) {
    out << "  warning: job " << job.get<std::string>() << " has a query open for over "
        << PolicyState::kOverdueTargets << " times its target: best-effort work no longer waits for it\n";
  }
  // What a status too long for one answer left out (bounded_status_text).
  for (const auto& [list, what] : {std::pair{"long_op_budget", "long-op budgets"}, {"idle_held", "devices' idle times"},
                                   {"marked_jobs", "jobs that mark arrivals"}, {"tight_targets", "tight-target warnings"},
                                   {"overdue_jobs", "overdue-query warnings"}}) {
    if (const auto omitted = json_integer_or(state, (std::string(list) + "_omitted").c_str(), std::uint64_t{0}); omitted > 0) {
      out << "  (" << omitted << " more " << what << " not shown)\n";
    }
  }
  return out.str();
}

std::string tight_target_text(const PolicyState::TightTarget& t) {
  // Sums and products in double: the figures come from the daemon's JSON too (`gpuqos status`), any
  // int64 there, and in int64 they overflow (a review: a target of INT64_MAX over queries of
  // -INT64_MAX). A double is exact for times under 104 days, far past any target.
  const auto ns = [](std::int64_t value) { return static_cast<double>(value); };
  const double slices_ns = ns(t.timeslice_ns) * std::max<std::uint32_t>(1, t.be_processes);
  if (t.target_ns < t.expected_query_ns) {
    // Not a question of the bound or the slices: no policy meets it, and baymax holds best-effort
    // work on the device for as long as each query is open, to make it as little late as it can.
    // What the target needs over the queries for the bound's or the slices' warning to stay quiet.
    const double wait_ns = t.backlog_bound_ns > 0 ? ns(t.backlog_wait_ns) : slices_ns;
    return t.job + "'s target of " + milliseconds(t.target_ns) + " ms is shorter than its queries take when nothing delays them (about " +
           milliseconds(t.expected_query_ns) + " ms): it cannot be met, and best-effort work on device " +
           std::to_string(t.device) + " is held while each of its queries is open (raise the target to " +
           milliseconds(ns(t.expected_query_ns) + wait_ns) + " ms or more)";
  }
  const std::string device = "device " + std::to_string(t.device);
  // Another high-priority process's query ahead (a run-to-end device): time the target needs too.
  const std::string ahead = t.ahead_ns > 0 ? " and the " + milliseconds(t.ahead_ns) +
                                                 " ms of another high-priority process's query that can run ahead of one"
                                           : "";
  const double slack = ns(t.target_ns) - ns(t.expected_query_ns) - ns(t.ahead_ns);
  if (slack < 0) {
    // The figures are measured beside best-effort work and err long: "can", not "will".
    return t.job + "'s target of " + milliseconds(t.target_ns) + " ms leaves no time over its queries' " +
           milliseconds(t.expected_query_ns) + " ms" + ahead + " on " + device +
           " (which runs kernels to their end): a query arriving behind such a query and any best-effort work can "
           "miss it (raise the target to " + milliseconds(ns(t.expected_query_ns) + ns(t.ahead_ns) + ns(t.backlog_wait_ns)) +
           " ms or more, run the jobs on different GPUs, or expect those misses)";
  }
  const std::string head = t.job + "'s target of " + milliseconds(t.target_ns) + " ms leaves " + milliseconds(slack) +
                           " ms over its queries' " + milliseconds(t.expected_query_ns) + " ms" + ahead + ", less than ";
  if (t.backlog_bound_ns > 0) {
    // The bound that would fit: the slack plus what drains before the query first waits.
    const double fits = slack + (ns(t.backlog_bound_ns) - ns(t.backlog_wait_ns));
    return head + milliseconds(t.backlog_wait_ns) + " ms, what a query arriving behind best-effort work on " + device +
           " (which runs kernels to their end) can wait for: the best-effort backlog bound of " +
           milliseconds(t.backlog_bound_ns) + " ms less the time its queries run before they first wait for the "
           "device. Such queries can miss the target (bring the bound under " + milliseconds(fits) +
           " ms: be_backlog_bound_ms, or min_backlog_bound_ms with adaptation; raise the target; or expect those "
           "misses)";
  }
  const std::string advice = " and can miss the target (raise the target, or expect those misses)";
  if (t.be_processes <= 1) {
    return head + device + "'s time slice of " + milliseconds(t.timeslice_ns) +
           " ms: a query arriving while best-effort work runs there waits for a slice of it" + advice;
  }
  const std::string n = std::to_string(t.be_processes);
  return head + n + " of " + device + "'s time slices of " + milliseconds(t.timeslice_ns) + " ms (" +
         milliseconds(slices_ns) + " ms, one for each of its " + n +
         " best-effort processes): a query arriving while their work runs waits for a slice of each" + advice;
}

std::string render_status_table(const nlohmann::json& status) {
  std::ostringstream out;
  const auto& daemon = status.at("daemon");
  out << "gpuqosd pid " << int64_at(daemon, "pid") << ", up " << uptime_text(int64_at(daemon, "uptime_ns")) << ", policy "
      << daemon.at("policy").get<std::string>() << ", socket " << daemon.at("socket").get<std::string>() << "\n";
  if (const auto truncated = status.find("truncated"); truncated != status.end()) {
    out << "  status cut short: " << truncated->get<std::string>() << "\n";
  }
  if (daemon.contains("config")) {
    const auto& config = daemon.at("config");
    const std::int64_t loaded_unix_s = json_integer_or(config, "loaded_unix_s", std::int64_t{0});
    out << "  config " << config.value("path", "") << ", read " << local_time_text(loaded_unix_s);
    if (!config.value("last_reload_ok", true)) {
      out << "; the reload at " << local_time_text(json_integer_or(config, "last_reload_unix_s", std::int64_t{0}))
          << " FAILED and was not applied: ";
      const std::string error = config.value("last_reload_error", "");
      const auto more = std::count(error.begin(), error.end(), '\n');
      out << error.substr(0, error.find('\n'));
      if (more > 0) out << " (and " << more << " more: gpuqosd --check-config " << config.value("path", "") << ")";
    }
    if (const std::string kept = config.value("needs_restart", ""); !kept.empty()) {
      // The config read then, not the file: a later reload that failed may have changed it back.
      out << "; the config read at " << local_time_text(loaded_unix_s) << " changes "
          << kept << ", which only a restart applies";
    }
    out << "\n";
  }
  if (daemon.contains("metrics")) {
    const auto& metrics = daemon.at("metrics");
    const auto text = [&](const char* key) {
      const nlohmann::json value = metrics.value(key, nlohmann::json());
      return value.is_string() ? value.get<std::string>() : std::string();
    };
    const std::string listen = text("listen"), serving = text("serving"), error = text("error");
    const nlohmann::json retry = metrics.value("retry_s", nlohmann::json());
    if (!error.empty() && !listen.empty()) {
      out << "  metrics: NOT serving: " << error;
      if (retry.is_number_integer()) out << " (trying again every " << json_integer<std::int64_t>(retry, "retry_s") << " s)";
      if (!serving.empty()) out << "; still serving http://" << serving << "/metrics";
      out << "\n";
    } else if (!serving.empty()) {
      out << "  metrics: serving http://" << serving << "/metrics\n";
    }
  }
  // (Absent from a daemon older than protocol 1.7.)
  for (const auto& device : status.value("devices", nlohmann::json::array())) {
    out << "  device " << device.at("device") << " is " << device.at("uuid").get<std::string>();
    if (device.at("ordinal") != device.at("device")) out << " (device " << device.at("ordinal") << " to its first job)";
    out << ", " << device.at("clients") << " client(s)";
    if (status.at("daemon").value("policy", "") == "baymax" && device.contains("preemptive")) {
      out << (device.at("preemptive").get<bool>()
                  ? ", time-slicing (" + milliseconds(json_integer_or(device, "timeslice_ns", std::int64_t{0})) + " ms slices)"
                  : ", runs kernels to their end");
    }
    out << "\n";
  }
  if (const auto omitted = json_integer_or(status, "devices_omitted", std::uint64_t{0}); omitted > 0) {
    out << "  (" << omitted << " more devices not shown)\n";
  }
  // GPUs its clients run unscheduled, by UUID ("" when a driver could not say), with their clients.
  std::map<std::string, int> unscheduled;
  for (const auto& c : status.at("clients")) {
    for (const auto& u : c.value("unscheduled_devices", nlohmann::json::array())) ++unscheduled[u.value("uuid", "")];
  }
  for (const auto& [uuid, clients] : unscheduled) {
    out << "  not scheduled: " << (uuid.empty() ? "a GPU whose UUID its driver cannot say" : uuid) << ", " << clients
        << " client(s) run their work there straight to the driver ([devices] does not name it)\n";
  }
  for (const auto& load : status.at("backlog")) {
    out << "  device " << load.at("device") << " " << load.at("engine").get<std::string>() << ": "
        << load.at("outstanding_ops") << " outstanding ops, backlog " << milliseconds(int64_at(load, "backlog_ns"))
        << " ms, " << load.at("completed_ops") << " completed";
    if (const auto lost = json_integer_or(load, "lost_ops", std::uint64_t{0}); lost > 0) {
      out << ", " << lost << " lost (no completion in " << EngineBacklog::kLostAfterNs / 1'000'000'000 << " s)";
    }
    out << "\n";
  }
  if (const auto omitted = json_integer_or(status, "backlog_omitted", std::uint64_t{0}); omitted > 0) {
    out << "  (" << omitted << " more engines' backlogs not shown)\n";
  }
  if (status.contains("policy_state")) out << render_policy_state(status);
  out << render_jobs_table(status);
  const int width = job_column_width(status.at("clients"));
  if (status.at("clients").empty() && !status.contains("clients_omitted")) {
    out << "no clients connected\n";
    return out.str();
  }
  // Formatted whole, however long (a row of 64 devices overran a 256-byte buffer: a review).
  out << fmt::format("{:<8} {:<6} {:<{}} {:<4} {:<7} {:<8} {:>10} {:>10} {:>10} {:>12}\n", "PID", "UID", "JOB", width,
                     "PRIO", "DEVICES", "STATE", "POSTED", "GRANTED", "COMPLETED", "WAIT_MS");
  bool lowered = false;  // a client runs below the class it claimed (footnote)
  for (const auto& c : status.at("clients")) {
    const auto& ops = c.at("ops");
    // gpuqosd's device numbers its GPU work named ("-": none yet)
    std::string devices;
    for (const auto& d : c.value("devices", nlohmann::json::array())) devices += (devices.empty() ? "" : ",") + d.dump();
    std::string prio = c.at("priority").get<std::string>();
    if (c.value("claimed_priority", prio) != prio) {
      prio += "*";
      lowered = true;
    }
    out << fmt::format("{:<8} {:<6} {:<{}} {:<4} {:<7} {:<8} {:>10} {:>10} {:>10} {:>12}\n", int64_at(c, "pid"),
                       json_integer<std::uint32_t>(c.at("uid"), "uid"), c.at("job").get<std::string>(), width, prio,
                       devices.empty() ? std::string("-") : devices, c.at("state").get<std::string>(),
                       json_integer<std::uint64_t>(ops.at("posted"), "posted"),
                       json_integer<std::uint64_t>(ops.at("granted"), "granted"),
                       json_integer<std::uint64_t>(ops.at("completed"), "completed"),
                       milliseconds(int64_at(c, "current_wait_ns")));
    for (const auto& u : c.value("unscheduled_devices", nlohmann::json::array())) {
      const std::string uuid = u.value("uuid", "");
      out << "         runs its device " << u.at("ordinal") << (uuid.empty() ? "" : " (" + uuid + ")")
          << " unscheduled\n";
    }
    if (c.contains("held_at")) {
      const auto& held = c.at("held_at");
      out << "         held at op " << held.at("seq") << ", " << held.at("op").get<std::string>() << " (predicted "
          << milliseconds(int64_at(held, "expected_ns")) << " ms, up to " << milliseconds(int64_at(held, "predicted_ns"))
          << " ms), by " << held.at("held_by").get<std::string>() << "\n";
    }
  }
  if (status.contains("clients_omitted")) out << "(" << status["clients_omitted"] << " more clients not shown)\n";
  if (lowered) out << "* claimed high priority; the config ([access], the job's allowed_priority) runs it as low\n";
  return out.str();
}

bool status_error_is_stall(const std::string& error) {
  return error.starts_with(kNoAnswerWithin) || error.find(ipc::kConnectQueueFull) != std::string::npos;
}

std::string status_error_text(const std::string& error, const std::string& socket_path) {
  // The hint only when nothing answered the connect (one that timed out did connect), and the error
  // does not already say what is at the path.
  if (!error.starts_with(kCannotReach) || error.find(socket_path) != std::string::npos) return error;
  return error + " (socket " + socket_path + "; is gpuqosd running?)";
}

ipc::Result<std::string> request_status(const std::string& socket_path, int quit_fd, const std::function<bool()>& quits) {
  auto socket = connect_unix(socket_path);
  if (!socket) return ipc::Error{std::string(kCannotReach) + socket.error()};
  constexpr int kAnswerWithinS = 5;
  const timeval timeout{kAnswerWithinS, 0};  // a daemon that never answers must not hang the CLI
  ::setsockopt(socket->get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (ipc::Status sent = ipc::send_record(socket->get(), ipc::encode_control_request(ipc::ControlKind::status)); !sent) {
    return ipc::Error{closed_without_an_answer("cannot ask gpuqosd: " + sent.error())};
  }
  std::vector<std::byte> record;
  pollfd watched[2] = {{socket->get(), POLLIN, 0}, {quit_fd, POLLIN, 0}};
  const std::int64_t deadline_ns = ipc::monotonic_ns() + std::int64_t{kAnswerWithinS} * 1'000'000'000;
  int ready = 0;
  for (;;) {
    const std::int64_t left_ms = std::max<std::int64_t>(0, (deadline_ns - ipc::monotonic_ns() + 999'999) / 1'000'000);
    ready = ::poll(watched, quit_fd >= 0 ? 2 : 1, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;  // receive_record's own timeout still bounds the wait
    if (quit_fd < 0 || (watched[1].revents & POLLIN) == 0) break;
    if (!quits || quits()) return ipc::Error{"quit while waiting for gpuqosd's answer"};
    if ((watched[0].revents & POLLIN) != 0) break;  // the answer came with a key that does not quit
    if (left_ms == 0) {
      ready = 0;
      break;
    }
  }
  if (ready == 0) {
    return ipc::Error{std::string(kNoAnswerWithin) + std::to_string(kAnswerWithinS) + " s (stopped, or too busy?)"};
  }
  if (ipc::Status got = ipc::receive_record(socket->get(), record, ipc::kMaxControlRecordBytes); !got) {
    return ipc::Error{closed_without_an_answer("no answer from gpuqosd: " + got.error())};
  }
  auto reply = ipc::decode_control_reply(record);
  if (!reply) return ipc::Error{reply.error()};
  if (reply->status != ipc::ControlStatus::ok) return ipc::Error{"gpuqosd refused: " + reply->text};
  return std::move(reply->text);
}

}  // namespace gpuqos::scheduler
