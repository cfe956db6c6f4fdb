// Tests of the jobs part of the status: its JSON, the table lines (latency against target), the
// grant counters, and cutting jobs to fit one control record.
#include <gtest/gtest.h>

#include "gpuqos/scheduler/status.h"
#include "gpuqos/scheduler/top_command.h"

namespace gpuqos::scheduler {
namespace {

constexpr std::int64_t kMs = 1'000'000;

JobQosSnapshot serve(std::int64_t p99_ns, bool meets) {
  JobQosSnapshot job;
  job.job = "serve";
  job.priority = ipc::Priority::high;
  job.clients = 1;
  job.target_ns = 6 * kMs;
  job.queries = 400;
  job.p50_ns = 2 * kMs;
  job.p90_ns = 3 * kMs;
  job.p99_ns = job.at_percentile_ns = p99_ns;
  job.p999_ns = 8'123'456;
  job.max_ns = 9 * kMs;
  job.violations = meets ? 0 : 3;
  job.violation_fraction = meets ? 0 : 3.0 / 400;
  job.meets_target = meets;
  return job;
}

JobQosSnapshot train() {
  JobQosSnapshot job;
  job.job = "train";
  job.clients = 2;
  job.be_ops = 5000;
  job.be_device_ns = 1234'567'890;
  job.be_ops_per_s = 250.25;
  job.be_busy_share = 0.4321;
  job.be_held_ns_by_reason = HoldTimes{};
  (*job.be_held_ns_by_reason)[static_cast<std::size_t>(HoldReason::bound)] = 700 * kMs;
  (*job.be_held_ns_by_reason)[static_cast<std::size_t>(HoldReason::deadline)] = 2'300 * kMs;
  return job;
}

DaemonStatus with_jobs(std::vector<JobQosSnapshot> jobs) {
  DaemonStatus status{42, 5'000'000'000, "baymax", "/tmp/s.sock", {}, {}};
  status.jobs = std::move(jobs);
  status.grants = GrantCounters{10, 4, 12 * kMs, 5 * kMs};
  status.grants.held_ns_by_reason = HoldTimes{};
  (*status.grants.held_ns_by_reason)[static_cast<std::size_t>(HoldReason::deadline)] = 1500 * kMs;
  (*status.grants.held_ns_by_reason)[static_cast<std::size_t>(HoldReason::budget)] = 250 * kMs;
  return status;
}

TEST(StatusJobs, JsonCarriesLatenciesTargetsAndProgress) {
  const auto json = nlohmann::json::parse(bounded_status_text(with_jobs({serve(3'900'000, true), train()})));
  EXPECT_EQ(json["version"], 2);
  ASSERT_EQ(json["jobs"].size(), 2u);
  const auto& s = json["jobs"][0];
  EXPECT_EQ(s["job"], "serve");
  EXPECT_EQ(s["priority"], "high");
  EXPECT_EQ(s["target_ms"], 6.0);
  EXPECT_EQ(s["percentile"], 99.0);
  EXPECT_EQ(s["queries"], 400);
  EXPECT_EQ(s["p99_ms"], 3.9);
  EXPECT_EQ(s["p999_ms"], 8.123) << "rounded to the microsecond";
  EXPECT_EQ(s["meets_target"], true);
  EXPECT_EQ(s["violations"], 0);
  const auto& t = json["jobs"][1];
  EXPECT_TRUE(t["target_ms"].is_null());
  EXPECT_TRUE(t["meets_target"].is_null());
  EXPECT_EQ(t["be"]["ops"], 5000);
  EXPECT_EQ(t["be"]["device_ms"], 1234.568);
  EXPECT_EQ(t["be"]["ops_per_s"], 250.25);
  EXPECT_EQ(t["be"]["busy_share"], 0.4321);
  EXPECT_EQ(t["be"]["held_ns_by_reason"]["deadline"], 2'300 * kMs);
  EXPECT_FALSE(s["be"].contains("held_ns_by_reason")) << "the serve job has none";
  EXPECT_EQ(json["grants"]["issued"], 10);
  EXPECT_EQ(json["grants"]["ops_held"], 4);
  EXPECT_EQ(json["grants"]["held_wait_ns_max"], 5 * kMs);
  EXPECT_EQ(json["grants"]["held_ns_by_reason"]["deadline"], 1500 * kMs);
  EXPECT_EQ(json["grants"]["held_ns_by_reason"]["bound"], 0);
}

TEST(StatusJobs, TableShowsLatencyAgainstTarget) {
  auto json = nlohmann::json::parse(bounded_status_text(with_jobs({serve(3'900'000, true), train()})));
  std::string table = render_status_table(json);
  EXPECT_NE(table.find("ok    p99 3.9 ms / target 6.0 ms\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  latency: from each query's first GPU op to the synchronisation that drains it\n"),
            std::string::npos)
      << "what the latencies are: not the client's own\n" << table;

  EXPECT_NE(table.find("BUSY"), std::string::npos) << table;
  EXPECT_NE(table.find("43.2%  deadline 2.3 s\n"), std::string::npos) << "the reason that held it longest\n" << table;
  EXPECT_NE(table.find("4 ops waited for a grant, "), std::string::npos) << table;
  EXPECT_NE(table.find("held by: deadline 1500 ms, budget 250 ms\n"), std::string::npos)
      << "the reasons that held anything, in their order\n" << table;

  // A job of processes of both classes (one name): its best-effort row says so, not "high".
  JobQosSnapshot both = train();
  both.priority = ipc::Priority::high;
  table = render_status_table(nlohmann::json::parse(bounded_status_text(with_jobs({both}))));
  EXPECT_NE(table.find("train            both      1       5000"), std::string::npos) << "and its weight\n" << table;
  EXPECT_NE(table.find(" PRIO WEIGHT "), std::string::npos) << table;
  both.weight = 2.5;  // the config's, which a user test found nowhere in the status
  json = nlohmann::json::parse(bounded_status_text(with_jobs({both})));
  EXPECT_EQ(json["jobs"][0]["weight"], 2.5);
  EXPECT_NE(render_status_table(json).find("train            both    2.5       5000"), std::string::npos)
      << render_status_table(json);

  json = nlohmann::json::parse(bounded_status_text(with_jobs({serve(7'200'000, false)})));
  table = render_status_table(json);
  EXPECT_NE(table.find("OVER  p99 7.2 ms / target 6.0 ms  (3 over, 0.75%)"), std::string::npos) << table;
  EXPECT_EQ(table.find("BUSY"), std::string::npos) << "no best-effort job\n" << table;
}

// Queries that never closed are said beside the verdict, and in the JSON (a review: a job whose
// queries hung or whose processes died mid-query read "ok" with nothing else to tell).
TEST(StatusJobs, AbandonedQueriesAreShown) {
  JobQosSnapshot job = serve(3'900'000, true);
  job.abandoned = 2;
  const auto json = nlohmann::json::parse(bounded_status_text(with_jobs({job})));
  EXPECT_EQ(json["jobs"][0]["abandoned_queries"], 2);
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("ok    p99 3.9 ms / target 6.0 ms  (2 abandoned)\n"), std::string::npos) << table;
  job.target_ns.reset();
  job.queries = 0;
  const std::string untargeted = render_status_table(nlohmann::json::parse(bounded_status_text(with_jobs({job}))));
  EXPECT_NE(untargeted.find("no target  (2 abandoned)\n"), std::string::npos) << untargeted;
}

TEST(StatusJobs, AnOlderDaemonsJsonWithoutJobsStillRenders) {
  auto json = nlohmann::json::parse(bounded_status_text(with_jobs({})));
  json.erase("jobs");
  json.erase("grants");
  EXPECT_NO_THROW(render_status_table(json));
}

TEST(StatusJobs, NoHeldByLineWithoutTheReasons) {
  DaemonStatus status = with_jobs({train()});
  status.grants.held_ns_by_reason.reset();  // a policy that does not say why
  auto json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_FALSE(json["grants"].contains("held_ns_by_reason"));
  EXPECT_EQ(render_status_table(json).find("held by"), std::string::npos);
  json = nlohmann::json::parse(bounded_status_text(with_jobs({train()})));
  json["grants"].erase("held_ns_by_reason");  // an older daemon
  EXPECT_EQ(render_status_table(json).find("held by"), std::string::npos);
}

// A policy's state (baymax's): the bound, the long-op budgets and each best-effort job's granted
// work, in the JSON and a line of the table; none from a policy that keeps none.
TEST(StatusJobs, ThePolicysStateWhenItKeepsOne) {
  DaemonStatus status = with_jobs({serve(3'900'000, true), train()});
  status.policy_state = PolicyState{4'500'000, 3, {{0, 12.5 * kMs, 300.0 * kMs}, {1, -7.25 * kMs, 150.0 * kMs}}, {}};
  status.jobs[1].be_outstanding_ns = 18 * kMs;
  auto json = nlohmann::json::parse(bounded_status_text(status));
  ASSERT_TRUE(json.contains("policy_state"));
  EXPECT_EQ(json["policy_state"]["backlog_bound_ns"], 4'500'000);
  EXPECT_EQ(json["policy_state"]["idle_stream_bound_ns"], 0) << "idle_bound_factor 1";
  EXPECT_EQ(json["policy_state"]["adaptation_steps"], 3);
  EXPECT_EQ(json["policy_state"]["idle_held"], nlohmann::json::array()) << "nothing held while idle yet";
  ASSERT_EQ(json["policy_state"]["long_op_budget"].size(), 2u);
  EXPECT_EQ(json["policy_state"]["long_op_budget"][1]["device"], 1);
  EXPECT_EQ(json["policy_state"]["long_op_budget"][1]["level_ns"], -7'250'000) << "in debt";
  EXPECT_EQ(json["policy_state"]["long_op_budget"][1]["cap_ns"], 150 * kMs);
  EXPECT_EQ(json["jobs"][1]["be"]["outstanding_ns"], 18 * kMs);
  EXPECT_FALSE(json["jobs"][0]["be"].contains("outstanding_ns")) << "the serve job has none";
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  best-effort bound 4.500 ms (3 adaptation steps), device 0 long-op budget 12.500 of "
                       "300.000 ms, device 1 long-op budget -7.250 of 150.000 ms\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  granted, not completed: train 18.000 ms\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("per stream with no query"), std::string::npos) << "idle_bound_factor 1";
  EXPECT_EQ(table.find("idle while best-effort"), std::string::npos) << "none yet: no line";
  status.policy_state->idle_stream_bound_ns = 18 * kMs;
  status.policy_state->idle_held = {{1, 2'500 * kMs}};
  json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_EQ(json["policy_state"]["idle_stream_bound_ns"], 18 * kMs);
  ASSERT_EQ(json["policy_state"]["idle_held"].size(), 1u);
  EXPECT_EQ(json["policy_state"]["idle_held"][0]["device"], 1);
  EXPECT_EQ(json["policy_state"]["idle_held"][0]["held_ns"], 2'500 * kMs);
  EXPECT_NE(render_status_table(json).find("  idle while best-effort compute was held: device 1 2500.000 ms\n"),
            std::string::npos)
      << render_status_table(json);
  EXPECT_NE(render_status_table(json).find("(3 adaptation steps), 18.000 ms per stream with no query in the system, "
                                           "device 0 long-op budget"),
            std::string::npos)
      << render_status_table(json);
  json["policy_state"].erase("idle_stream_bound_ns");  // an older daemon
  EXPECT_NE(render_status_table(json).find("(3 adaptation steps), device 0"), std::string::npos);
  EXPECT_EQ(render_status_table(json).find("query open for over"), std::string::npos) << "none overdue";
  // A user test: an overdue query was said in the JSON and the log, not in the table.
  status.policy_state->overdue_jobs = {"serve"};
  json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_NE(render_status_table(json).find("  warning: job serve has a query open for over 4 times its target: "
                                           "best-effort work no longer waits for it\n"),
            std::string::npos)
      << render_status_table(json);

  status.policy_state.reset();
  status.jobs[1].be_outstanding_ns.reset();
  json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_FALSE(json.contains("policy_state"));
  EXPECT_FALSE(json["jobs"][1]["be"].contains("outstanding_ns"));
  EXPECT_EQ(render_status_table(json).find("best-effort bound"), std::string::npos);
}

// A job that says its arrivals: its measured rate and each query's allowance, in the JSON and a
// line of the table each; none from an older daemon.
TEST(StatusJobs, AMarkedJobsArrivalGapAndAllowanceAreShown) {
  JobQosSnapshot marked = serve(3'900'000, true);
  marked.latency_from = LatencyFrom::arrival;
  DaemonStatus status = with_jobs({marked, train()});
  status.policy_state = PolicyState{4'500'000, 0, {}, {}};
  status.policy_state->marked_jobs = {{"serve", 26'200'000, 4'000'000}, {"search", 0, 20 * kMs}};
  auto json = nlohmann::json::parse(bounded_status_text(status));
  ASSERT_EQ(json["policy_state"]["marked_jobs"].size(), 2u);
  EXPECT_EQ(json["policy_state"]["marked_jobs"][0]["job"], "serve");
  EXPECT_EQ(json["policy_state"]["marked_jobs"][0]["mean_arrival_gap_ns"], 26'200'000);
  EXPECT_EQ(json["policy_state"]["marked_jobs"][0]["query_allowance_ns"], 4'000'000);
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  serve says its arrivals: one every 26.200 ms (mean of its latest arrivals, at most 64); a query may run 4.000 ms past its own time "
                       "(the margin included)\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  search says its arrivals: too few yet for a rate; a query may run 20.000 ms past"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("  latency: from each request's arrival (the job says it) to its gpuqos_query_end()\n"),
            std::string::npos)
      << "the one job shown runs from the arrival\n" << table;
  EXPECT_EQ(table.find("first GPU op"), std::string::npos) << "no job shown is measured so\n" << table;
  json["policy_state"].erase("marked_jobs");  // the job gone (or an older daemon)
  EXPECT_EQ(render_status_table(json).find("says its arrivals"), std::string::npos);
  EXPECT_NE(render_status_table(json).find("  latency: from each request's arrival"), std::string::npos)
      << "its latencies were measured so, whether or not it is still here";
  EXPECT_EQ(json["jobs"][0]["latency_from"], "arrival");
}

// Jobs measured each way: each kind names its jobs. A user test: a job with begin and end marks was
// said to run "from each query's first GPU op to the synchronisation that drains it" (and its JSON
// "first_op"), where its latencies ran from its first begin to its end, host time included.
TEST(StatusJobs, TheLatencyLineNamesTheJobsMeasuredEachWay) {
  JobQosSnapshot rank = serve(3'900'000, true);
  rank.job = "rank";
  JobQosSnapshot marked = serve(3'900'000, true);
  marked.latency_from = LatencyFrom::arrival;
  JobQosSnapshot bracketed = serve(3'900'000, true);
  bracketed.job = "embed";
  bracketed.latency_from = LatencyFrom::begin;
  DaemonStatus status = with_jobs({marked, rank, bracketed, train()});
  status.policy_state = PolicyState{4'500'000, 0, {}, {}};
  status.policy_state->marked_jobs = {{"serve", 26'200'000, 4'000'000}};
  const auto json = nlohmann::json::parse(bounded_status_text(status));
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  latency: from each query's first GPU op to the synchronisation that drains it for rank; "
                       "from each query's gpuqos_query_begin() to its gpuqos_query_end() for embed; from each "
                       "request's arrival (the job says it) to its gpuqos_query_end() for serve\n"),
            std::string::npos)
      << table;
  EXPECT_EQ(json["jobs"][2]["latency_from"], "begin");
  status = with_jobs({bracketed, train()});
  EXPECT_NE(render_status_table(nlohmann::json::parse(bounded_status_text(status)))
                .find("  latency: from each query's gpuqos_query_begin() to its gpuqos_query_end()\n"),
            std::string::npos);
}

// A target with less than one time slice of slack: in the JSON, and a warning line of the table
// that gives the figures; none from an older daemon.
TEST(StatusJobs, ATightTargetIsWarnedOf) {
  DaemonStatus status = with_jobs({serve(3'900'000, true), train()});
  status.policy_state = PolicyState{4'500'000, 0, {}, {}};
  status.policy_state->tight_targets = {{"serve", 1, 23'600'000, 15'800'000, 8 * kMs, 1},
                                         {"serve", 2, 23'600'000, 15'800'000, 8 * kMs, 2}};
  auto json = nlohmann::json::parse(bounded_status_text(status));
  ASSERT_EQ(json["policy_state"]["tight_targets"].size(), 2u);
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["job"], "serve");
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["device"], 1);
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["target_ns"], 23'600'000);
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["expected_query_ns"], 15'800'000);
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["timeslice_ns"], 8 * kMs);
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  warning: serve's target of 23.600 ms leaves 7.800 ms over its queries' 15.800 ms, less "
                       "than device 1's time slice of 8.000 ms: a query arriving while best-effort work runs there "
                       "waits for a slice of it and can miss the target"),
            std::string::npos)
      << table;
  // A target shorter than the queries: no bound or slice would do; said so, whatever the device.
  const auto unreachable = [](const char* raise_to) {
    return "serve's target of 10.000 ms is shorter than its queries take when nothing delays them (about 12.000 ms): "
           "it cannot be met, "
           "and best-effort work on device 0 is held while each of its queries is open (raise the target to " +
           std::string(raise_to) + " ms or more)";
  };
  EXPECT_EQ(tight_target_text({"serve", 0, 10 * kMs, 12 * kMs, 8 * kMs, 2}), unreachable("28.000"))
      << "a slice for each of 2 best-effort processes over the queries";
  EXPECT_EQ(tight_target_text({"serve", 0, 10 * kMs, 12 * kMs, 0, 1, 5 * kMs, 3 * kMs}), unreachable("15.000"))
      << "the wait the bound can cost a query over the queries";
  // On a run-to-end device another high-priority process's query can be ahead: its time counts too.
  PolicyState::TightTarget behind{"fast", 0, 8 * kMs, 2 * kMs, 0, 1, 5 * kMs, 5 * kMs, 4 * kMs};
  EXPECT_EQ(tight_target_text(behind),
            "fast's target of 8.000 ms leaves 2.000 ms over its queries' 2.000 ms and the 4.000 ms of another "
            "high-priority process's query that can run ahead of one, less than 5.000 ms, what a query arriving behind "
            "best-effort work on device 0 (which runs kernels to their end) can wait for: the best-effort backlog bound "
            "of 5.000 ms less the time its queries run before they first wait for the device. Such queries can miss "
            "the target (bring the bound under 2.000 ms: be_backlog_bound_ms, or min_backlog_bound_ms with "
            "adaptation; raise the target; or expect those misses)");
  behind.ahead_ns = 7 * kMs;
  EXPECT_EQ(tight_target_text(behind),
            "fast's target of 8.000 ms leaves no time over its queries' 2.000 ms and the 7.000 ms of another "
            "high-priority process's query that can run ahead of one on device 0 (which runs kernels to their end): a "
            "query arriving behind such a query and any best-effort work can miss it (raise the target to 14.000 ms "
            "or more, run the jobs on different GPUs, or expect those misses)");
  status.policy_state->tight_targets.push_back(behind);
  auto with_ahead = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_EQ(with_ahead["policy_state"]["tight_targets"][2]["ahead_ns"], 7 * kMs);
  EXPECT_NE(render_status_table(with_ahead).find("warning: " + tight_target_text(behind)), std::string::npos);
  status.policy_state->tight_targets.pop_back();
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["be_processes"], 1);
  EXPECT_EQ(json["policy_state"]["tight_targets"][1]["be_processes"], 2);
  json["policy_state"]["tight_targets"].erase(1);
  // Two best-effort processes: a slice of each.
  json["policy_state"]["tight_targets"][0]["be_processes"] = 2;
  EXPECT_NE(render_status_table(json).find("  warning: serve's target of 23.600 ms leaves 7.800 ms over its queries' "
                                           "15.800 ms, less than 2 of device 1's time slices of 8.000 ms (16.000 ms, "
                                           "one for each of its 2 best-effort processes): a query arriving while "
                                           "their work runs waits for a slice of each and can miss the target"),
            std::string::npos)
      << render_status_table(json);
  json["policy_state"]["tight_targets"][0].erase("be_processes");  // a daemon before they were counted: one
  EXPECT_NE(render_status_table(json).find("less than device 1's time slice of 8.000 ms: "), std::string::npos)
      << render_status_table(json);
  json["policy_state"].erase("tight_targets");  // an older daemon
  EXPECT_EQ(render_status_table(json).find("warning"), std::string::npos);
  status.policy_state->tight_targets.clear();
  EXPECT_EQ(render_status_table(nlohmann::json::parse(bounded_status_text(status))).find("warning"), std::string::npos);
}

// A review: the warning's sums and products were int64, and a daemon's answer (or its own figures)
// overflowed them, undefined behaviour that printed a wrapped figure. They are in double now.
TEST(StatusJobs, ATightTargetsFiguresDoNotOverflow) {
  constexpr std::int64_t kMax = INT64_MAX;
  const std::string wide = tight_target_text({"serve", 0, kMax, -kMax, 8 * kMs, 1});
  EXPECT_NE(wide.find("serve's target of 9223372036854.775 ms leaves 18446744073709.551 ms over its queries' "
                      "-9223372036854.775 ms"),
            std::string::npos)
      << wide;
  const std::string slices = tight_target_text({"serve", 1, 10 * kMs, 8 * kMs, 9'223'372'036'854'775'000, 3});
  EXPECT_NE(slices.find("3 of device 1's time slices of 9223372036854.775 ms (27670116110564.324 ms, one for each"),
            std::string::npos)
      << slices;
  const std::string unreachable = tight_target_text({"serve", 1, 10 * kMs, kMax, kMax, 3});
  EXPECT_NE(unreachable.find("(raise the target to 36893488147419.102 ms or more)"), std::string::npos) << unreachable;
  PolicyState::TightTarget bound{"serve", 0, kMax, 0, 0, 1, kMax, -kMax, 0};
  EXPECT_NE(tight_target_text(bound).find("bring the bound under 27670116110564.328 ms"), std::string::npos)
      << tight_target_text(bound);
  bound = {"serve", 0, 0, 0, 0, 1, kMax, kMax, kMax};
  EXPECT_NE(tight_target_text(bound).find("(raise the target to 18446744073709.551 ms or more"), std::string::npos)
      << tight_target_text(bound);
  // From an answer, a negative time is refused as unexpected rather than warned of.
  DaemonStatus status = with_jobs({serve(3'900'000, true)});
  status.policy_state = PolicyState{4'500'000, 0, {}, {}};
  status.policy_state->tight_targets = {{"serve", 1, 23'600'000, 15'800'000, 8 * kMs, 1}};
  auto json = nlohmann::json::parse(bounded_status_text(status));
  json["policy_state"]["tight_targets"][0]["expected_query_ns"] = -kMax;
  EXPECT_THROW(render_status_table(json), nlohmann::json::type_error);
}

// On a device that runs kernels to their end the warning is about the backlog bound, and says how
// low it must go; its JSON entry carries the bound, which a time-slicing device's leaves out.
TEST(StatusJobs, ATightTargetOnARunToEndDeviceNamesTheBound) {
  DaemonStatus status = with_jobs({serve(3'900'000, true), train()});
  status.policy_state = PolicyState{20 * kMs, 0, {}, {}};
  PolicyState::TightTarget run_to_end{"serve", 0, 23'600'000, 15'800'000, 0, 2};
  run_to_end.backlog_bound_ns = 20 * kMs;
  run_to_end.backlog_wait_ns = 12 * kMs;  // 8 ms before the query first waits
  status.policy_state->tight_targets = {run_to_end, {"serve", 1, 23'600'000, 15'800'000, 8 * kMs, 1}};
  const auto json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["backlog_bound_ns"], 20 * kMs);
  EXPECT_EQ(json["policy_state"]["tight_targets"][0]["backlog_wait_ns"], 12 * kMs);
  EXPECT_FALSE(json["policy_state"]["tight_targets"][1].contains("backlog_bound_ns"));
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  warning: serve's target of 23.600 ms leaves 7.800 ms over its queries' 15.800 ms, less "
                       "than 12.000 ms, what a query arriving behind best-effort work on device 0 (which runs kernels "
                       "to their end) can wait for: the best-effort backlog bound of 20.000 ms less the time its "
                       "queries run before they first wait for the device. Such queries can miss the target (bring "
                       "the bound under 15.800 ms: be_backlog_bound_ms, or min_backlog_bound_ms with adaptation; "
                       "raise the target; or expect those misses)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("less than device 1's time slice of 8.000 ms"), std::string::npos) << table;
}

TEST(StatusJobs, ManyJobsAndClientsAreCutToFitOneRecord) {
  std::vector<JobQosSnapshot> jobs;
  for (int i = 0; i < 256; ++i) {
    jobs.push_back(serve(3 * kMs, true));
    jobs.back().job = "job-with-a-long-name-" + std::to_string(i);
  }
  DaemonStatus status = with_jobs(jobs);
  for (std::uint32_t i = 0; i < 1000; ++i) {
    status.clients.push_back(ClientStatus{i + 1, 100 + i, 1000, 1000, "job-" + std::to_string(i), ipc::Priority::low,
                                          0, "running", "/gpuqos-42-1", 3, 2, 1, {4, 1, 1}, 9, 2, 0, 0});
  }
  const std::string text = bounded_status_text(status);
  EXPECT_LE(text.size(), ipc::kMaxControlTextBytes);
  const auto json = nlohmann::json::parse(text);
  EXPECT_EQ(json["jobs"].size() + json.value("jobs_omitted", std::size_t{0}), 256u);
  EXPECT_EQ(json["clients"].size() + json.value("clients_omitted", std::size_t{0}), 1000u);
  EXPECT_GT(json["jobs"].size(), 20u) << "jobs are not all sacrificed to clients";
  EXPECT_GT(json["clients"].size(), 20u);
  EXPECT_EQ(json["jobs"][0]["job"], "job-with-a-long-name-0") << "cut from the end";
  EXPECT_NE(render_status_table(json).find("more jobs not shown"), std::string::npos);
}

// A review: 520 tight targets made a status of 67,972 bytes, which only the clients and jobs were
// cut from; the record could not be encoded, and gpuqosd closed the connection without an answer
// ("no answer from gpuqosd: peer closed"). Every list of the status is cut now, each counted.
TEST(StatusJobs, AStatusOfManyTightTargetsIsCutToFitOneRecord) {
  DaemonStatus status = with_jobs({serve(3'900'000, true)});
  status.policy_state = PolicyState{4'500'000, 0, {}, {}};
  for (std::uint32_t i = 0; i < 520; ++i) {
    status.policy_state->tight_targets.push_back(
        {"job-with-a-long-name-" + std::to_string(i), i % 64, 23'600'000, 15'800'000, 8 * kMs, 1});
  }
  for (std::uint32_t i = 0; i < 64; ++i) status.backlog.push_back(EngineLoad{i, Engine::compute, 1, 10, 2, 20});
  const std::string text = bounded_status_text(status);
  EXPECT_LE(text.size(), ipc::kMaxControlTextBytes);
  const auto json = nlohmann::json::parse(text);
  const auto& state = json["policy_state"];
  ASSERT_TRUE(state.contains("tight_targets_omitted")) << text.size();
  EXPECT_EQ(state["tight_targets"].size() + state["tight_targets_omitted"].get<std::size_t>(), 520u);
  EXPECT_EQ(state["tight_targets"][0]["job"], "job-with-a-long-name-0") << "cut from the end";
  EXPECT_EQ(json["backlog"].size(), 64u) << "the shorter lists are left whole";
  EXPECT_FALSE(json.contains("backlog_omitted"));
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  (" + std::to_string(state["tight_targets_omitted"].get<std::size_t>()) +
                       " more tight-target warnings not shown)\n"),
            std::string::npos)
      << table;
  // Far less room: every list gives way, each said.
  const auto small = nlohmann::json::parse(bounded_status_text(status, 4096));
  EXPECT_GT(small["backlog_omitted"].get<std::size_t>(), 0u);
  const std::string small_table = render_status_table(small);
  EXPECT_NE(small_table.find(" more engines' backlogs not shown)\n"), std::string::npos) << small_table;
}

// What no cut of the lists makes fit (a reload's error of 70,000 bytes) is still an answer: the
// daemon's line and why there is nothing more, never a text the record cannot hold.
TEST(StatusJobs, AStatusThatNoCutFitsIsAnsweredWithTheDaemonsLine) {
  DaemonStatus status = with_jobs({serve(3'900'000, true), train()});
  status.config = ConfigStatus{"/etc/gpuqos.toml", 1'700'000'000, false, 1'700'000'100, std::string(70'000, 'e')};
  const std::string text = bounded_status_text(status);
  EXPECT_LE(text.size(), ipc::kMaxControlTextBytes);
  const auto json = nlohmann::json::parse(text);
  EXPECT_EQ(json["jobs_omitted"], 2);
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("gpuqosd pid 42, up 5.0 s, policy baymax, socket /tmp/s.sock\n  status cut short: the status ("),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("does not fit one answer (65520 bytes): only the daemon's line is shown\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("(2 more jobs not shown)"), std::string::npos) << table;
  EXPECT_LE(bounded_status_text(status, 1024).size(), 1024u);
}

// A user test: on a 20-column terminal top's frames (lines of up to 169 characters) wrapped and
// scrolled, so only their bottom was on the screen.
TEST(StatusJobs, TopFitsItsFrameToTheWindow) {
  const std::string frame = "title line\nab\n0123456789abc\nlast\n";
  EXPECT_EQ(fit_to_terminal(frame, 0, 0), frame) << "no window: as it is";
  EXPECT_EQ(fit_to_terminal(frame, 5, 0), "title\nab\n01234\nlast\n");
  // A review: a newline after the window's last row scrolled the title line off the top. The last
  // line has none on a window of any height.
  EXPECT_EQ(fit_to_terminal(frame, 0, 4), "title line\nab\n0123456789abc\nlast") << "exactly the height";
  EXPECT_EQ(fit_to_terminal(frame, 0, 10), "title line\nab\n0123456789abc\nlast");
  EXPECT_EQ(fit_to_terminal(frame, 0, 3), "title line\nab\n(2 more lines: a taller window shows them)");
  EXPECT_EQ(fit_to_terminal(frame, 8, 2), "title li\n(3 more ");
  EXPECT_EQ(fit_to_terminal("p99 \u2264 5 \u00b5s\n", 5, 0), "p99 \u2264\n") << "cut by characters, not bytes";
  EXPECT_EQ(fit_to_terminal("\u00b5s \u00b5s\n", 4, 0), "\u00b5s \u00b5\n");
  EXPECT_EQ(fit_to_terminal("", 10, 10), "");
}

TEST(StatusJobs, TopFrameIsTheTableUnderATitle) {
  const auto json = nlohmann::json::parse(bounded_status_text(with_jobs({serve(3'900'000, true)})));
  TopOptions options;
  options.interval_s = 2;
  const std::string frame = render_top_frame(json, options);
  EXPECT_EQ(frame.rfind("gpuqos top at ", 0), 0u) << frame;
  EXPECT_NE(frame.find("every 2 s (Ctrl-C quits)"), std::string::npos) << frame;
  EXPECT_NE(frame.find("ok    p99 3.9 ms / target 6.0 ms"), std::string::npos) << frame;
}

}  // namespace
}  // namespace gpuqos::scheduler
