// gpuqos-bench qos's plan (mixes, --quick, the grid, the gpuqosd config it writes) and report
// (qos.json records, the table, log tails), and gpuqos-bench weights' config and table.
#include <gtest/gtest.h>

#include <limits>

#include "gpuqos/config/load.h"
#include "output_dir.h"
#include "plan.h"
#include "report.h"
#include "weights.h"

namespace gpuqos::qos {
namespace {

TEST(QosPlan, MixesNameKnownJobsOnce) {
  const auto mix = mix_workloads("resnet+recsys");
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_EQ(mix[0].job, "resnet-train");
  EXPECT_EQ(mix[1].job, "recsys-train");
  EXPECT_THROW(mix_workloads("resnet+bert"), std::invalid_argument);
  EXPECT_THROW(mix_workloads("resnet+resnet"), std::invalid_argument);
  EXPECT_THROW(mix_workloads(""), std::invalid_argument);
}

TEST(QosPlan, QuickKeepsAMinimumOfQueriesTheUserGave) {
  Options o;
  o.quick = true;
  o.min_queries = 400;
  apply_quick(o, false, false, false, true);
  EXPECT_EQ(o.min_queries, 400u);
}

TEST(QosPlan, QuickKeepsWhatTheUserGave) {
  Options o;
  o.quick = true;
  o.loads = {0.6};
  EXPECT_EQ(o.min_queries, 450u) << "the full grid's default";
  apply_quick(o, false, true, false, false);
  EXPECT_EQ(o.duration_s, 5);
  EXPECT_EQ(o.min_queries, 0u) << "quick runs last --duration";
  EXPECT_EQ(o.loads, std::vector<double>{0.6});
  EXPECT_EQ(o.be_mixes, std::vector<std::string>{"resnet"});
  EXPECT_NO_THROW(validate(o));
  o.loads = {1.0};
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.loads = {0.4};
  o.policies = {"fifo", "edf"};
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.policies = {"fifo"};
  EXPECT_EQ(Options{}.daemon_target, "end-to-end") << "the target the report judges cells by";
  o.daemon_target = "end-to-end";
  EXPECT_NO_THROW(validate(o));
  EXPECT_EQ(lc_margin_ms(o), kEndToEndLcMarginMs) << "end-to-end targets: the LC's own margin";
  o.baymax.safety_margin_ms = 4;
  EXPECT_EQ(lc_margin_ms(o), 4.0) << "the --baymax-from file's, when larger";
  o.lc_margin_ms = 0;
  EXPECT_EQ(lc_margin_ms(o), 0.0) << "as given";
  o.lc_margin_ms = -1;
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.lc_margin_ms = std::numeric_limits<double>::infinity();
  EXPECT_THROW(validate(o), std::invalid_argument);
  o.lc_margin_ms.reset();
  // A review: --duration inf passed, and every replayer then refused it (and duration_cast of it
  // is undefined).
  for (double Options::*number : {&Options::duration_s, &Options::time_scale, &Options::target_factor}) {
    const double kept = o.*number;
    o.*number = std::numeric_limits<double>::infinity();
    EXPECT_THROW(validate(o), std::invalid_argument);
    o.*number = std::numeric_limits<double>::quiet_NaN();
    EXPECT_THROW(validate(o), std::invalid_argument);
    o.*number = kept;
  }
  EXPECT_NO_THROW(validate(o));
  o.daemon_target = "service";
  EXPECT_FALSE(lc_margin_ms(o)) << "service targets: the policy's margin";
  o.daemon_log_level = "trace";
  EXPECT_NO_THROW(validate(o));
  o.daemon_log_level = "verbose";
  EXPECT_THROW(validate(o), std::invalid_argument) << "not a gpuqosd --log-level";
  o.daemon_log_level.clear();
  o.daemon_target = "arrival";
  try {
    validate(o);
    ADD_FAILURE() << "an unknown --daemon-target passed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--daemon-target"), std::string::npos) << e.what();
  }
}

TEST(QosPlan, GridHasEveryCellModeOutermostPolicyInnermost) {
  Options o;  // 4 policies x 2 modes x 3 loads x 2 mixes
  const auto cells = plan_cells(o);
  ASSERT_EQ(cells.size(), 48u);
  EXPECT_EQ(cells[0].policy, "none");
  EXPECT_EQ(cells[3].policy, "baymax");
  EXPECT_EQ(cells[3].device_mode, "fifo");
  EXPECT_EQ(cells[4].be_mix, "resnet+recsys");
  EXPECT_EQ(cells[24].device_mode, "timeslice");
  EXPECT_EQ(cell_name(cells[5]), "fifo-fifo-0.20-resnet+recsys");
  EXPECT_EQ(be_workloads_used(o).size(), 2u);
  EXPECT_EQ(shared_mixes(o), std::vector<std::string>{"resnet+recsys"}) << "its jobs also run alone together";
  o.be_mixes = {"resnet", "recsys"};
  EXPECT_TRUE(shared_mixes(o).empty()) << "a one-job mix alone is its standalone run";
}

TEST(QosPlan, GpuqosdConfigListsTheCellsJobs) {
  config::BaymaxConfig baymax;
  baymax.max_be_transfers = 3;
  baymax.adaptation = true;
  const std::string toml = gpuqosd_config_toml({"baymax", "fifo", 0.4, "resnet+recsys"}, 31.25, 4.0, baymax, "x.toml");
  EXPECT_NE(toml.find("name = \"baymax\""), std::string::npos);
  EXPECT_NE(toml.find("name = \"bert-infer\"\nallowed_priority = \"high\"\ntarget_ms = 31.250\npercentile = 99\n\n"),
            std::string::npos) << "no margin of its own unless given";
  EXPECT_NE(toml.find("name = \"recsys-train\"\nallowed_priority = \"low\""), std::string::npos);
  EXPECT_NE(toml.find("be_backlog_bound_ms = 20.000"), std::string::npos);  // 5 ms x time scale 4
  EXPECT_NE(toml.find("safety_margin_ms = 4.000"), std::string::npos);
  EXPECT_NE(toml.find("max_be_transfers = 3\n"), std::string::npos) << "counts are not scaled";
  EXPECT_NE(toml.find("adaptation = true\n"), std::string::npos);
  EXPECT_NE(toml.find("# x.toml's [policy.baymax]"), std::string::npos);
  EXPECT_NE(toml.find("long_op_tail_share = 0.500\n"), std::string::npos);
  EXPECT_NE(toml.find("preemptive_device = false\n"), std::string::npos) << "fifo runs kernels to their end";
  EXPECT_NE(toml.find("bound_by_slices = false\n"), std::string::npos);
  EXPECT_NE(toml.find("idle_bound_factor = 1.000\n"), std::string::npos) << toml;
  baymax.bound_by_slices = true;
  baymax.idle_bound_factor = 4;
  const std::string sliced = gpuqosd_config_toml({"baymax", "timeslice", 0.4, "resnet"}, 31.25, 4.0, baymax, "x.toml");
  EXPECT_NE(sliced.find("preemptive_device = true\n"), std::string::npos);
  EXPECT_NE(sliced.find("timeslice_ms = 8.000\n"), std::string::npos) << "the device's 2 ms x time scale 4";
  const auto reparsed = config::parse_config(sliced, "cell.toml");
  ASSERT_TRUE(reparsed) << reparsed.error();
  EXPECT_EQ(reparsed.value().policy.baymax.timeslice_ms, 8.0) << "gpuqosd reads what the bench wrote";
  EXPECT_TRUE(reparsed.value().policy.baymax.bound_by_slices) << "the --baymax-from file's choice";
  EXPECT_EQ(reparsed.value().policy.baymax.idle_bound_factor, 4.0) << "a factor: not scaled";
  const std::string margined =
      gpuqosd_config_toml({"baymax", "fifo", 0.4, "resnet"}, 31.25, 4.0, baymax, "x.toml", 2.5);
  const auto margined_parsed = config::parse_config(margined, "cell.toml");
  ASSERT_TRUE(margined_parsed) << margined_parsed.error();
  EXPECT_EQ(margined_parsed.value().jobs.at(0).safety_margin_ms, 10.0) << "the LC's own, x time scale 4";
  EXPECT_FALSE(margined_parsed.value().jobs.at(1).safety_margin_ms) << "the BE job's: none";
  const std::string shared = gpuqosd_config_toml({"baymax", "mps", 0.4, "resnet"}, 31.25, 4.0, baymax, "x.toml");
  EXPECT_NE(shared.find("preemptive_device = false\n"), std::string::npos)
      << "MPS shares SMs: a long kernel delays a query for all of its overlap, not one slice";
}

TEST(QosPlan, AWeightsRunsConfigGivesEachJobItsWeightAndTheLcOnlyWhenItRuns) {
  const std::string with_lc = gpuqosd_config_toml("weights-fifo-lc-1-4", "baymax", "fifo", 23.5,
                                                  {{"resnet-a", 1.0}, {"resnet-b", 4.0}}, 4.0, {}, "x.toml");
  const auto parsed = config::parse_config(with_lc, "weights.toml");
  ASSERT_TRUE(parsed) << parsed.error();
  ASSERT_EQ(parsed.value().jobs.size(), 3u);
  EXPECT_EQ(parsed.value().jobs[0].name, "bert-infer");
  EXPECT_EQ(parsed.value().jobs[2].name, "resnet-b");
  EXPECT_EQ(parsed.value().jobs[2].weight, 4.0);
  EXPECT_EQ(parsed.value().jobs[1].weight, 1.0);
  EXPECT_EQ(parsed.value().jobs[0].target_ms, 23.5);
  const std::string alone = gpuqosd_config_toml("weights-fifo-nolc-1-4", "baymax", "fifo", std::nullopt,
                                                {{"resnet-a", 0.0015}}, 4.0, {}, "x.toml");
  const auto alone_parsed = config::parse_config(alone, "alone.toml");
  ASSERT_TRUE(alone_parsed) << alone_parsed.error();
  ASSERT_EQ(alone_parsed.value().jobs.size(), 1u) << "no LC: no bert-infer job";
  EXPECT_EQ(alone_parsed.value().jobs[0].weight, 0.0015) << "a small weight is not rounded";
}

TEST(WeightsReport, EachRunShowsBothThroughputsAndTheirRatio) {
  WeightsRun even{"timeslice", true, 1.0, 23.5, LcStats{100, 10, 9, 30, {}}, {"resnet-a", 20, 1.0}, {"resnet-b", 21, 1.05}, 0.9, {}};
  WeightsRun weighted = even;
  weighted.weight_b = 4;
  weighted.a = {"resnet-a", 8, 0.4};
  weighted.b = {"resnet-b", 32, 1.6};
  WeightsRun failed{"fifo", false, 4.0, 0, std::nullopt, {}, {}, 0, {false, "gpuqosd did not start", "", ""}};
  EXPECT_DOUBLE_EQ(share_ratio(weighted).value(), 4.0);
  EXPECT_FALSE(share_ratio(failed)) << "no throughput: no ratio, not 0 nor a division by zero";
  const WeightsResults results{{even, weighted, failed}, {}};
  const std::string md = weights_markdown(results, 4.0);
  EXPECT_NE(md.find("| timeslice | yes | 1:4.00 | 0.40 | 1.60 | 4.00 | 90 % | 30.0 | ok |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fifo | no | 1:4.00 | failed: gpuqosd did not start |"), std::string::npos) << md;
  WeightsOptions options;
  options.removed_env = {"CUDA_VISIBLE_DEVICES", "LD_PRELOAD"};
  const nlohmann::json json = weights_json(results, options);
  EXPECT_EQ(json["config"]["removed_env"], nlohmann::json({"CUDA_VISIBLE_DEVICES", "LD_PRELOAD"}))
      << "what the children did not inherit is part of the setup";
  ASSERT_EQ(json["runs"].size(), 3u);
  EXPECT_DOUBLE_EQ(json["runs"][1]["b_over_a"].get<double>(), 4.0);
  EXPECT_EQ(json["runs"][1]["b_iterations"], 32);
  EXPECT_FALSE(json["runs"][2]["ok"].get<bool>());
  EXPECT_FALSE(json["runs"][2].contains("b_over_a"));

  // A review: a's throughput of 0 made b/a 0, as if b had been starved.
  WeightsRun starved = even;
  starved.a = {"resnet-a", 0, 0.0};
  const WeightsResults one{{starved}, {}};
  EXPECT_NE(weights_markdown(one, 4.0).find("| 0.00 | 1.05 | n/a | 90 % |"), std::string::npos) << weights_markdown(one, 4.0);
  EXPECT_TRUE(weights_json(one, options)["runs"][0]["b_over_a"].is_null());
}

TEST(WeightsReport, AFailedTrainingIsRecordedAndCaveatsTheRunsAfterIt) {
  // A review: a failed training left every run of the mode on an untrained predictor and the
  // report said nothing; weights.json had no record of it and the exit code ignored it.
  WeightsRun run{"fifo", true, 4.0, 23.5, LcStats{100, 10, 9, 30, {}}, {"resnet-a", 8, 0.4}, {"resnet-b", 32, 1.6}, 0.9, {}};
  run.status.caveat = "gpuqosd started from an untrained predictor (weights-train-fifo failed)";
  const WeightsResults results{{run}, {{"fifo", {false, "gpuqos train exited with 1", "/x/train.log", "no samples\n"}},
                                      {"timeslice", {}}}};
  EXPECT_EQ(failed_runs(results), 1u) << "the training, though every pair ran";
  const std::string md = weights_markdown(results, 4.0);
  EXPECT_NE(md.find("| 30.0 | ok, but gpuqosd started from an untrained predictor (weights-train-fifo failed) |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("Predictor training (fifo) failed: gpuqos train exited with 1"), std::string::npos) << md;
  EXPECT_EQ(md.find("Predictor training (timeslice)"), std::string::npos) << "one that went is not news";
  const nlohmann::json json = weights_json(results, WeightsOptions{});
  ASSERT_EQ(json["training"].size(), 2u);
  EXPECT_EQ(json["training"][0]["device_mode"], "fifo");
  EXPECT_FALSE(json["training"][0]["ok"].get<bool>());
  EXPECT_EQ(json["training"][0]["reason"], "gpuqos train exited with 1");
  EXPECT_TRUE(json["training"][1]["ok"].get<bool>());
  EXPECT_EQ(json["runs"][0]["caveat"], "gpuqosd started from an untrained predictor (weights-train-fifo failed)");
}

TEST(QosReport, AFailedTrainingIsAFailedRunAndCaveatsItsModesCells) {
  // A review: when `gpuqos train` failed, the cells of the mode ran on an untrained predictor
  // (baymax holding best-effort work on wild upper estimates) and read "ok", and qos.json, qos.md
  // and the exit code all passed over it.
  Results r;
  r.trainings = {{"fifo", {false, "gpuqos train exited with 1", "/x/train-fifo.log", "no samples\n"}},
                 {"timeslice", {}}};
  const Cell baymax{"baymax", "fifo", 0.4, "resnet"};
  EXPECT_EQ(untrained_caveat(baymax, r.trainings), "gpuqosd started from an untrained predictor (train-fifo failed)");
  EXPECT_EQ(untrained_caveat({"none", "fifo", 0.4, "resnet"}, r.trainings), "") << "no gpuqosd: no predictor";
  EXPECT_EQ(untrained_caveat({"baymax", "timeslice", 0.4, "resnet"}, r.trainings), "") << "its training went";
  EXPECT_EQ(untrained_caveat({"baymax", "mps", 0.4, "resnet"}, r.trainings), "") << "no training recorded";
  Status caveated;
  add_caveat(caveated, "lc ran unmanaged 1 time(s)");
  add_caveat(caveated, "");
  add_caveat(caveated, untrained_caveat(baymax, r.trainings));
  EXPECT_TRUE(caveated.ok);
  EXPECT_EQ(caveated.caveat,
            "lc ran unmanaged 1 time(s); gpuqosd started from an untrained predictor (train-fifo failed)");

  EXPECT_EQ(failed_runs(r), 1u) << "the failed training counts, the one that went does not";
  const nlohmann::json j = results_json(r, {});
  ASSERT_EQ(j.at("training").size(), 2u);
  EXPECT_EQ(j["training"][0]["device_mode"], "fifo");
  EXPECT_EQ(j["training"][0]["status"], "failed");
  EXPECT_EQ(j["training"][0]["reason"], "gpuqos train exited with 1");
  EXPECT_EQ(j["training"][0]["log"], "/x/train-fifo.log");
  EXPECT_EQ(j["training"][1]["status"], "ok");
  const std::string md = results_markdown(r, 4.0);
  EXPECT_NE(md.find("| fifo | predictor training | | | | | | | | | | failed: gpuqos train exited with 1 |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| timeslice | predictor training | | | | | | | | | | ok |"), std::string::npos) << md;
}

TEST(QosReport, FailedCellsKeepTheirReasonAndNoFigures) {
  Results r;
  CellResult ok;
  ok.cell = {"fifo", "fifo", 0.4, "resnet"};
  ok.lc_reference = true;
  ok.target_ms = 30;
  ok.lc.p99_ms = 45;
  ok.violation_fraction = 0.25;
  ok.be = {{{"resnet-train", 10, 1.2}, 2.0, 0.6, 1.5, 0.8}};
  ok.be_fraction_of_ideal = 0.75;
  ok.be_fraction_of_ideal_together = 0.9;
  CellResult unreferenced = ok;
  unreferenced.be_fraction_of_ideal_together.reset();
  StandaloneMix together;
  together.device_mode = "timeslice";
  together.be_mix = "resnet+recsys";
  together.runs = {{"resnet-train", 18, 1.83}, {"recsys-train", 10, 1.04}};
  r.standalone_mixes = {together};
  CellResult bad;
  bad.cell = {"baymax", "fifo", 0.4, "resnet"};
  bad.status = {false, "gpuqosd exited at startup", "/x/gpuqosd.log", "unknown policy\n"};
  r.cells = {ok, bad, unreferenced};
  const nlohmann::json j = results_json(r, {{"quick", true}});
  ASSERT_EQ(j.at("cells").size(), 3u);
  EXPECT_EQ(j["cells"][0]["status"], "ok");
  EXPECT_DOUBLE_EQ(j["cells"][0]["p99_over_target"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["cells"][0]["be"][0]["fraction_of_standalone"].get<double>(), 0.6);
  EXPECT_EQ(j["cells"][1]["status"], "failed");
  EXPECT_EQ(j["cells"][1]["reason"], "gpuqosd exited at startup");
  EXPECT_TRUE(j["cells"][1]["lc_p99_ms"].is_null());
  EXPECT_TRUE(j["cells"][1]["be_fraction_of_ideal_together"].is_null());
  EXPECT_DOUBLE_EQ(j["cells"][0]["be_fraction_of_ideal_together"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(j["cells"][0]["be"][0]["fraction_of_mix_alone"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(j["cells"][0]["be"][0]["mix_alone_iterations_per_s"].get<double>(), 1.5);
  EXPECT_TRUE(j["cells"][2]["be_fraction_of_ideal_together"].is_null()) << "no reference: no figure";
  const nlohmann::json& mix = j.at("standalone").back();
  EXPECT_EQ(mix["kind"], "be_mix");
  EXPECT_EQ(mix["be_mix"], "resnet+recsys");
  EXPECT_DOUBLE_EQ(mix["be"][1]["iterations_per_s"].get<double>(), 1.04);
  const std::string md = results_markdown(r, 4.0);
  EXPECT_NE(md.find("| fifo | fifo | 0.40 | resnet | 0.00 | 45.00 | n/a | 30.00 | 1.50 | 25 % |"), std::string::npos);
  EXPECT_TRUE(j["cells"][0]["lc_p99_ci95_ms"][0].is_null()) << "no queries: no interval";
  EXPECT_TRUE(j["cells"][1]["lc_p99_ci95_ms"].is_null()) << "a failed cell has no figures";
  r.cells[0].lc_p99_ci95 = {40.5, 47.25};
  EXPECT_NE(results_markdown(r, 4.0).find("| 45.00 | 40.50–47.25 | 30.00 |"), std::string::npos);
  EXPECT_EQ(results_json(r, {})["cells"][0]["lc_p99_ci95_ms"], nlohmann::json::array({40.5, 47.25}));
  r.cells[0].lc_p99_ci95.high.reset();
  EXPECT_NE(results_markdown(r, 4.0).find("| 45.00 | ≥ 40.50 | 30.00 |"), std::string::npos);
  EXPECT_NE(md.find("failed: gpuqosd exited at startup"), std::string::npos);
  EXPECT_NE(md.find("| timeslice | resnet+recsys alone together | | | | | | | | | 1.83, 1.04 | ok |"),
            std::string::npos);
  EXPECT_NE(md.find("| 75 % | 90 % |"), std::string::npos) << "of the ideal, and of it with the mix alone as reference";
  EXPECT_NE(md.find("| 75 % | n/a |"), std::string::npos);
  // A run that went but not entirely as the policy's (a review: a job that fell open still read "ok").
  r.cells[0].status.caveat = "lc ran unmanaged 1 time(s)";
  EXPECT_NE(results_markdown(r, 4.0).find("| ok, but lc ran unmanaged 1 time(s) |"), std::string::npos);
  EXPECT_EQ(results_json(r, {})["cells"][0]["caveat"], "lc ran unmanaged 1 time(s)");
  EXPECT_EQ(failed_runs(r), 1u) << "a caveat is not a failure";
  r.cells[0].status.caveat.clear();
  // What the exit code is made of (a review: it was 0 with every cell failed).
  EXPECT_EQ(failed_runs(r), 1u) << "the failed cell";
  r.standalone_mixes.at(0).status.ok = false;
  EXPECT_EQ(failed_runs(r), 2u) << "a failed reference counts too";
  EXPECT_FALSE(j.contains("interrupted"));
  EXPECT_EQ(md.find("Interrupted"), std::string::npos);
  r.interrupted = true;
  EXPECT_EQ(results_json(r, {})["interrupted"], true);
  EXPECT_NE(results_markdown(r, 4.0).find("Interrupted: the runs after these were not made."), std::string::npos);
}

TEST(QosReport, AFigureWithoutItsReferenceIsNullAndNaNotZero) {
  // A review: a BE job whose standalone run failed was reported at 0 % of it, and the cell's BE %
  // of ideal computed over that 0; a cell without a target had p99/target 0.
  CellResult c;
  c.cell = {"baymax", "fifo", 0.4, "resnet+recsys"};
  c.target_ms = 30;
  c.lc.p99_ms = 45;
  c.be = {{{"resnet-train", 10, 1.2}, 2.0, 0.6, 1.5, 0.8}, {{"recsys-train", 3, 0.3}, {}, {}, 0.5, 0.6}};
  c.be_fraction_of_ideal_together = 0.875;
  c.status.caveat = "no BE % of standalone or of ideal: recsys-train alone failed: recsys replayer crashed";
  Results r;
  r.cells = {c};
  const nlohmann::json j = results_json(r, {});
  const nlohmann::json& cell = j.at("cells").at(0);
  EXPECT_EQ(cell["status"], "ok");
  EXPECT_EQ(cell["caveat"], c.status.caveat);
  EXPECT_TRUE(cell["be_fraction_of_ideal"].is_null()) << cell.dump();
  EXPECT_TRUE(cell["be"][1]["standalone_iterations_per_s"].is_null());
  EXPECT_TRUE(cell["be"][1]["fraction_of_standalone"].is_null());
  EXPECT_DOUBLE_EQ(cell["be"][1]["fraction_of_mix_alone"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(cell["be"][0]["fraction_of_standalone"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(cell["be_fraction_of_ideal_together"].get<double>(), 0.875);
  const std::string md = results_markdown(r, 4.0);
  EXPECT_NE(md.find("| 1.20, 0.30 | 60 %, n/a | n/a | 88 % |"), std::string::npos) << md;
  EXPECT_NE(md.find("| ok, but no BE % of standalone or of ideal: recsys-train alone failed: recsys replayer crashed |"),
            std::string::npos)
      << md;

  r.cells[0].target_ms = 0;  // no target to hold the p99 to
  EXPECT_TRUE(results_json(r, {})["cells"][0]["p99_over_target"].is_null());
  EXPECT_NE(results_markdown(r, 4.0).find("| 0.00 | n/a | 0 % |"), std::string::npos) << results_markdown(r, 4.0);
}

TEST(QosReport, AFailedReferenceRunHasNoFiguresNotZeros) {
  // A review: a failed calibration, standalone LC, BE or mix run was reported with 0 ms, 0 it/s and
  // a 0 target, in qos.md and qos.json alike, and so was each cell that rested on a failed one.
  const Status crashed{false, "replayer crashed", "/x/alone.log", "tail\n"};
  Results r;
  r.calibrations = {{"fifo", {}, crashed}};
  StandaloneLc lc;
  lc.device_mode = "fifo";
  lc.lc_load = 0.4;
  lc.rate_per_s = 25;  // set before the run: the planned rate
  lc.status = crashed;
  StandaloneLc uncalibrated = lc;
  uncalibrated.lc_load = 0.6;
  uncalibrated.rate_per_s = 0;  // no calibration: no rate
  r.standalone_lc = {lc, uncalibrated};
  StandaloneBe be;
  be.device_mode = "fifo";
  be.job = "recsys-train";
  be.status = crashed;
  r.standalone_be = {be};
  StandaloneMix mix;
  mix.device_mode = "fifo";
  mix.be_mix = "resnet+recsys";
  mix.runs = {{"resnet-train", 0, 0.0}};  // read before it failed
  mix.status = crashed;
  r.standalone_mixes = {mix};
  r.cells = {failed_cell({"baymax", "fifo", 0.4, "resnet"}, lc, {false, "no standalone LC reference", "", ""})};

  const nlohmann::json j = results_json(r, {});
  const nlohmann::json& standalone = j.at("standalone");
  ASSERT_EQ(standalone.size(), 5u);
  for (const nlohmann::json& record : standalone) {
    EXPECT_EQ(record["status"], "failed");
    EXPECT_EQ(record["reason"], "replayer crashed");
    for (const char* key : {"lc_p50_ms", "lc_p99_ms", "lc_mean_ms", "lc_queries", "lc_unserved", "target_ms",
                            "lc_load_measured", "lc_gpu_busy_fraction", "iterations", "iterations_per_s",
                            "gpu_busy_fraction"}) {
      if (record.contains(key)) {
        EXPECT_TRUE(record[key].is_null()) << key << " of " << record.dump();
      }
    }
  }
  EXPECT_DOUBLE_EQ(standalone[1]["rate_per_s"].get<double>(), 25.0) << "planned, not measured";
  EXPECT_TRUE(standalone[2]["rate_per_s"].is_null()) << "no calibration: no rate";
  EXPECT_EQ(standalone[1]["lc_load"], 0.4);
  EXPECT_TRUE(standalone[4]["be"][0]["iterations_per_s"].is_null());
  const nlohmann::json& cell = j.at("cells").at(0);
  for (const char* key : {"target_ms", "rate_per_s", "lc_gpu_busy_fraction_standalone"}) {
    EXPECT_TRUE(cell[key].is_null()) << key << ": its reference failed";
  }

  const std::string md = results_markdown(r, 4.0);
  EXPECT_NE(md.find("| fifo | LC closed loop | | | | | | | | | | failed: replayer crashed |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fifo | LC alone | 0.40 | 25.0 | | | | | | | | failed: replayer crashed |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| fifo | LC alone | 0.60 | | | | | | | | | failed: replayer crashed |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fifo | recsys-train alone | | | | | | | | | | failed: replayer crashed |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| fifo | resnet+recsys alone together | | | | | | | | | | failed: replayer crashed |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| baymax | fifo | 0.40 | resnet | | | | | | | | | | | | | failed: no standalone LC reference |"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("0.00 |"), std::string::npos) << "no zero stands for a figure not measured\n" << md;

  // The same cell beside a reference that went keeps its target.
  lc.status = {};
  lc.target_ms = 30;
  r.cells = {failed_cell({"baymax", "fifo", 0.4, "resnet"}, lc, {false, "gpuqosd exited at startup", "", ""})};
  EXPECT_DOUBLE_EQ(results_json(r, {})["cells"][0]["target_ms"].get<double>(), 30.0);
  EXPECT_NE(results_markdown(r, 4.0).find("| baymax | fifo | 0.40 | resnet | | | | 30.00 | | | | | | | | | failed: gpuqosd "
                                         "exited at startup |"),
            std::string::npos)
      << "in the target column (it stood under the CI's)\n"
      << results_markdown(r, 4.0);
}

// Whether `text` is valid UTF-8: nlohmann's strict dump() throws type_error 316 where it is not.
bool is_utf8(const std::string& text) {
  try {
    (void)nlohmann::json(text).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

TEST(QosReport, BytesThatAreNotUtf8InAReasonLeaveEveryResultTextValid) {
  // A review: a reason or log tail holds a child's bytes as they came; nlohmann's dump() throws
  // type_error 316 on them (losing qos.json), and qos.md took them as they were.
  const std::string bad = "simgpud: \xff\xfe at \xc3(";
  ASSERT_FALSE(is_utf8(bad));
  const std::string replaced = "simgpud: \xef\xbf\xbd\xef\xbf\xbd at \xef\xbf\xbd(";
  EXPECT_EQ(valid_utf8(bad), replaced);
  EXPECT_EQ(valid_utf8("≥ 40.50–47.25 ok"), "≥ 40.50–47.25 ok") << "valid text is kept as it is";

  Results r;
  r.trainings = {{"fifo", {false, "gpuqos train: " + bad, "/x/\xff.log", bad}}};
  CellResult cell;
  cell.cell = {"baymax", "fifo", 0.4, "resnet"};
  cell.status = {false, bad, "/x/cell.log", "last line " + bad + "\n"};
  r.cells = {cell};
  EXPECT_THROW((void)results_json(r, {}).dump(2), nlohmann::json::type_error) << "what json_text must spare";
  std::string text;
  ASSERT_NO_THROW(text = json_text(results_json(r, {})));
  ASSERT_TRUE(is_utf8(text));
  const nlohmann::json parsed = nlohmann::json::parse(text);
  EXPECT_EQ(parsed["cells"][0]["reason"], replaced);
  EXPECT_EQ(parsed["training"][0]["log_tail"], replaced);
  const std::string md = results_markdown(r, 4.0);
  EXPECT_TRUE(is_utf8(md)) << "qos.md";
  EXPECT_NE(md.find("failed: " + replaced + " |"), std::string::npos) << md;
  EXPECT_NE(md.find("failed: gpuqos train: " + replaced + " |"), std::string::npos) << md;

  WeightsRun run{"fifo", false, 4.0, 0, std::nullopt, {}, {}, 0, {false, bad, "", ""}};
  const WeightsResults weights{{run}, {{"fifo", {false, bad, "", ""}}}};
  EXPECT_TRUE(is_utf8(weights_markdown(weights, 4.0))) << "weights.md";
  std::string weights_text;
  ASSERT_NO_THROW(weights_text = json_text(weights_json(weights, WeightsOptions{})));
  EXPECT_EQ(nlohmann::json::parse(weights_text)["runs"][0]["reason"], replaced);
}

TEST(QosReport, TailLines) {
  EXPECT_EQ(tail_lines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(tail_lines("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(tail_lines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(tail_lines("", 3), "");
}

}  // namespace
}  // namespace gpuqos::qos
