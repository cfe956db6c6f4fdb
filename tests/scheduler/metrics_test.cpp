// Tests of the Prometheus text rendering (format 0.0.4): line syntax, families, escaping, values.
#include "gpuqos/scheduler/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

namespace gpuqos::scheduler {
namespace {

constexpr std::int64_t kMs = 1'000'000;

DaemonStatus sample_status() {
  DaemonStatus status;
  status.uptime_ns = 12'500 * kMs;
  status.backlog = {EngineLoad{0, Engine::compute, 3, 4 * kMs, 10, 20 * kMs, 2}, EngineLoad{1, Engine::h2d, 1, kMs / 2, 0, 0}};
  status.devices = {DeviceStatus{1, "GPU-5053021f-f19c-8f3e-af75-ba138af7d608", 0, 2, true, 2'000'000},
                    DeviceStatus{2, "GPU-8601f82c-036c-8858-b907-c46eb6bf5f92", 2, 1, false, 2'000'000}};
  ClientStatus high, low;
  high.priority = ipc::Priority::high;
  status.clients = {high, low, low};
  status.config = ConfigStatus{"/etc/gpuqos.toml", 1'790'000'000, false, 1'790'000'100, "bad"};
  status.clients[1].unscheduled = {{0, "GPU-aa000000-0000-0000-0000-000000000001"}};
  status.clients[2].unscheduled = {{3, "GPU-aa000000-0000-0000-0000-000000000001"}};
  JobQosSnapshot serve;
  serve.job = "serve";
  serve.priority = ipc::Priority::high;
  serve.target_ns = 6 * kMs;
  serve.percentile = 99.9;
  serve.queries = 200;
  serve.latency_sum_ns = 600.0 * kMs;
  serve.p50_ns = 3 * kMs;
  serve.p90_ns = 4 * kMs;
  serve.p99_ns = 5 * kMs;
  serve.p999_ns = 7 * kMs;
  serve.violations = 1;
  serve.abandoned = 2;
  serve.meets_target = false;
  serve.at_most = {0, 0, 0, 0, 10, 190, 199, 199, 199, 199, 199, 199, 199, 199, 199, 199};  // one over 10 s
  JobQosSnapshot train;
  train.job = "tr\"ain\\x\ny";
  train.be_ops = 1234;
  train.be_device_ns = 2'500 * kMs;
  train.be_busy_share = 0.5;
  train.be_held_ns_by_reason = HoldTimes{};
  (*train.be_held_ns_by_reason)[static_cast<std::size_t>(HoldReason::deadline)] = 250 * kMs;
  JobQosSnapshot fresh;  // high priority, no query yet
  fresh.job = "fresh";
  fresh.priority = ipc::Priority::high;
  status.jobs = {serve, train, fresh};
  status.grants = GrantCounters{42, 17, 340 * kMs, 25 * kMs};
  status.grants.held_ns_by_reason = HoldTimes{};
  (*status.grants.held_ns_by_reason)[static_cast<std::size_t>(HoldReason::deadline)] = 250 * kMs;
  status.policy_state = PolicyState{4'500'000, 3, {{1, -250.0 * kMs, 300.0 * kMs}}, {{"train", 18 * kMs}}};
  return status;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& l : lines_of(text)) {
    if (l == line) return true;
  }
  return false;
}

TEST(Metrics, EveryLineFollowsTheTextFormatAndEveryFamilyIsTypedOnceBeforeItsSamples) {
  const std::string text = render_metrics(sample_status());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const std::regex sample(R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*",?)*\})? (NaN|[+-]Inf|-?[0-9.]+(e[+-]?[0-9]+)?))re");
  const std::regex comment(R"(# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  std::set<std::string> typed;
  std::string current;
  for (const auto& line : lines_of(text)) {
    std::smatch match;
    if (std::regex_match(line, match, comment)) {
      if (match[1] == "TYPE") {
        EXPECT_TRUE(typed.insert(match[2]).second) << "typed twice: " << line;
        current = match[2];
      }
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, match, sample)) << "not a sample line: '" << line << "'\n" << text;
    const std::string name = match[1];
    EXPECT_TRUE(name == current || name == current + "_sum" || name == current + "_count" || name == current + "_bucket")
        << name << " outside its family " << current;
  }
  for (const char* family :
       {"gpuqos_query_latency_seconds", "gpuqos_query_target_seconds", "gpuqos_query_violations_total",
        "gpuqos_query_abandoned_total", "gpuqos_be_ops_completed_total", "gpuqos_be_device_seconds_total", "gpuqos_grants_total",
        "gpuqos_ops_held_total", "gpuqos_grant_wait_seconds_total", "gpuqos_device_info", "gpuqos_engine_backlog_seconds",
        "gpuqos_engine_outstanding_ops", "gpuqos_engine_lost_ops_total", "gpuqos_clients", "gpuqos_be_held_seconds_total"}) {
    EXPECT_TRUE(typed.contains(family)) << family;
  }
}

TEST(Metrics, QueryLatencyIsASummaryInSeconds) {
  const std::string text = render_metrics(sample_status());
  EXPECT_EQ(text.find("job="), std::string::npos) << "Prometheus's own label: ours is job_name\n" << text;
  EXPECT_TRUE(has_line(text, "# TYPE gpuqos_query_latency_seconds summary")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_seconds{job_name=\"serve\",quantile=\"0.5\"} 0.003")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_seconds{job_name=\"serve\",quantile=\"0.999\"} 0.007")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_seconds_sum{job_name=\"serve\"} 0.6")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_seconds_count{job_name=\"serve\"} 200")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_seconds{job_name=\"fresh\",quantile=\"0.99\"} NaN"))
      << "no query yet: NaN, as Prometheus' own summaries do\n" << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_target_seconds{job_name=\"serve\",percentile=\"99.9\"} 0.006")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_meets_target{job_name=\"serve\"} 0")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_violations_total{job_name=\"serve\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_abandoned_total{job_name=\"serve\"} 2")) << text;
  EXPECT_EQ(text.find("gpuqos_query_target_seconds{job_name=\"fresh\""), std::string::npos) << "it has no target";
}

// A job whose high-priority process left mid-query while a low one of it stays is low, with no
// query closed: its abandoned query is still exported (a review: the family skipped it).
TEST(Metrics, AbandonedQueriesOfAJobNowLowAreExported) {
  DaemonStatus status = sample_status();
  JobQosSnapshot left;
  left.job = "left";
  left.priority = ipc::Priority::low;
  left.abandoned = 1;
  status.jobs.push_back(left);
  const std::string text = render_metrics(status);
  EXPECT_TRUE(has_line(text, "gpuqos_query_abandoned_total{job_name=\"left\"} 1")) << text;
  EXPECT_EQ(text.find("gpuqos_query_violations_total{job_name=\"left\"}"), std::string::npos)
      << "nothing else of its queries to show\n" << text;
  EXPECT_EQ(text.find("gpuqos_query_abandoned_total{job_name=\"tr"), std::string::npos) << "none abandoned\n" << text;
}

// And as a histogram of fixed bounds (cumulative, `le` in seconds, then +Inf), which Prometheus can
// sum across daemons and take histogram_quantile of; a summary's quantiles cannot be aggregated.
TEST(Metrics, QueryLatencyIsAlsoAHistogram) {
  const std::string text = render_metrics(sample_status());
  EXPECT_TRUE(has_line(text, "# TYPE gpuqos_query_latency_histogram_seconds histogram")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_histogram_seconds_bucket{job_name=\"serve\",le=\"0.0001\"} 0")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_histogram_seconds_bucket{job_name=\"serve\",le=\"0.005\"} 190")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_histogram_seconds_bucket{job_name=\"serve\",le=\"10\"} 199")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_histogram_seconds_bucket{job_name=\"serve\",le=\"+Inf\"} 200")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_histogram_seconds_sum{job_name=\"serve\"} 0.6")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_histogram_seconds_count{job_name=\"serve\"} 200")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_query_latency_histogram_seconds_bucket{job_name=\"fresh\",le=\"+Inf\"} 0"))
      << "no query yet: zeros\n" << text;
  EXPECT_EQ(text.find("gpuqos_query_latency_histogram_seconds_count{job_name=\"tr"), std::string::npos)
      << "a best-effort job has no queries";
}

TEST(Metrics, BestEffortGrantsEnginesAndClients) {
  const std::string text = render_metrics(sample_status());
  EXPECT_TRUE(has_line(text, R"(gpuqos_be_ops_completed_total{job_name="tr\"ain\\x\ny"} 1234)")) << text;
  EXPECT_TRUE(has_line(text, R"(gpuqos_be_device_seconds_total{job_name="tr\"ain\\x\ny"} 2.5)")) << text;
  EXPECT_EQ(text.find("gpuqos_be_ops_completed_total{job_name=\"serve\""), std::string::npos) << "a high-priority job";
  EXPECT_TRUE(has_line(text, "gpuqos_grants_total 42")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_ops_held_total 17")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_grant_wait_seconds_total 0.34")) << text;
  EXPECT_TRUE(has_line(text, R"(gpuqos_be_held_seconds_total{job_name="tr\"ain\\x\ny",reason="deadline"} 0.25)")) << text;
  EXPECT_TRUE(has_line(text, R"(gpuqos_be_held_seconds_total{job_name="tr\"ain\\x\ny",reason="budget"} 0)")) << text;
  EXPECT_EQ(text.find("gpuqos_be_held_seconds_total{job_name=\"serve\""), std::string::npos) << "no hold times: none";
  EXPECT_TRUE(has_line(text, "gpuqos_engine_backlog_seconds{device=\"0\",engine=\"compute\"} 0.004")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_engine_outstanding_ops{device=\"1\",engine=\"h2d\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_engine_lost_ops_total{device=\"0\",engine=\"compute\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_device_info{device=\"1\",uuid=\"GPU-5053021f-f19c-8f3e-af75-ba138af7d608\","
                             "ordinal=\"0\"} 1"))
      << "which GPU a device label names\n" << text;
  EXPECT_TRUE(has_line(text, "gpuqos_device_timeslice_seconds{device=\"1\"} 0.002")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_unscheduled_device_clients{uuid=\"GPU-aa000000-0000-0000-0000-000000000001\"} 2"))
      << "two clients run that GPU unscheduled, whatever each calls it\n" << text;
  EXPECT_EQ(text.find("gpuqos_device_timeslice_seconds{device=\"2\""), std::string::npos) << "runs kernels to their end";
  EXPECT_TRUE(has_line(text, "gpuqos_clients{priority=\"high\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_clients{priority=\"low\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_uptime_seconds 12.5")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_config_last_reload_successful 0")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_config_last_reload_success_timestamp_seconds 1.79e+09")) << text;
}

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(escape_label_value("plain-job.1"), "plain-job.1");
  EXPECT_EQ(escape_label_value("a\"b"), "a\\\"b");
  EXPECT_EQ(escape_label_value("a\\b"), "a\\\\b");
  EXPECT_EQ(escape_label_value("a\nb"), "a\\nb");
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
}

TEST(Metrics, SampleValues) {
  EXPECT_EQ(format_sample_value(0), "0");
  EXPECT_EQ(format_sample_value(1234), "1234");
  EXPECT_EQ(format_sample_value(0.001), "0.001");
  EXPECT_EQ(format_sample_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_sample_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_sample_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(std::stod(format_sample_value(1.0 / 3)), 1.0 / 3) << "reads back exactly";
}

TEST(Metrics, ThePolicysStateWhenItKeepsOne) {
  DaemonStatus status = sample_status();
  const std::string text = render_metrics(status);
  EXPECT_TRUE(has_line(text, "gpuqos_be_backlog_bound_seconds 0.0045")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_be_backlog_bound_steps_total 3")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_long_op_budget_seconds{device=\"1\"} -0.25")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_long_op_budget_cap_seconds{device=\"1\"} 0.3")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_be_outstanding_seconds{job_name=\"train\"} 0.018")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE gpuqos_be_backlog_bound_steps_total counter")) << text;
  EXPECT_EQ(text.find("gpuqos_be_idle_stream_bound_seconds"), std::string::npos) << "idle_bound_factor 1: absent";
  EXPECT_EQ(text.find("gpuqos_be_held_while_idle_seconds_total{"), std::string::npos) << "no device held idle yet";
  status.policy_state->idle_held = {{1, 250 * kMs}};
  const std::string held = render_metrics(status);
  EXPECT_TRUE(has_line(held, "gpuqos_be_held_while_idle_seconds_total{device=\"1\"} 0.25")) << held;
  EXPECT_TRUE(has_line(held, "# TYPE gpuqos_be_held_while_idle_seconds_total counter")) << held;
  status.policy_state->idle_stream_bound_ns = 18 * kMs;
  const std::string idle = render_metrics(status);
  EXPECT_TRUE(has_line(idle, "gpuqos_be_idle_stream_bound_seconds 0.018")) << idle;
  EXPECT_TRUE(has_line(idle, "# TYPE gpuqos_be_idle_stream_bound_seconds gauge")) << idle;
  EXPECT_NE(idle.find("# HELP gpuqos_be_idle_stream_bound_seconds "), std::string::npos) << idle;
  EXPECT_EQ(idle.find("gpuqos_query_allowance_seconds{"), std::string::npos) << "no job marks its arrivals";
  status.policy_state->marked_jobs = {{"serve", 26 * kMs, 4 * kMs}, {"search", 0, 20 * kMs}};
  const std::string marked = render_metrics(status);
  EXPECT_TRUE(has_line(marked, "gpuqos_query_arrival_gap_seconds{job_name=\"serve\"} 0.026")) << marked;
  EXPECT_EQ(marked.find("gpuqos_query_arrival_gap_seconds{job_name=\"search\"}"), std::string::npos)
      << "no rate yet: absent, not zero";
  EXPECT_TRUE(has_line(marked, "gpuqos_query_allowance_seconds{job_name=\"serve\"} 0.004")) << marked;
  EXPECT_TRUE(has_line(marked, "gpuqos_query_allowance_seconds{job_name=\"search\"} 0.02")) << marked;
  status.policy_state.reset();
  EXPECT_EQ(render_metrics(status).find("gpuqos_be_backlog_bound_seconds"), std::string::npos)
      << "a policy that keeps no state: absent, not zero";
}

TEST(Metrics, AnIdleDaemonStillRendersEveryDaemonFamily) {
  const std::string text = render_metrics(DaemonStatus{});
  EXPECT_TRUE(has_line(text, "gpuqos_grants_total 0")) << text;
  EXPECT_TRUE(has_line(text, "gpuqos_clients{priority=\"high\"} 0")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE gpuqos_query_latency_seconds summary")) << text;
  EXPECT_EQ(text.find("gpuqos_be_held_seconds_total"), std::string::npos)
      << "no hold reasons from a policy that does not give them: absent, not zero\n" << text;
}

}  // namespace
}  // namespace gpuqos::scheduler
