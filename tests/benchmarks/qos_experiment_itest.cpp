// gpuqos-bench qos's experiment when its device cannot start: every run of the mode is a failed
// record with the reason, and nothing escapes to lose the results already measured. simgpud is
// given a compute mode it does not know, so it exits at once: a second or two.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "bench_runs.h"
#include "experiment.h"
#include "gpuqos/testing/temp_dir.h"
#include "qos_rig.h"

namespace gpuqos::qos {
namespace {

bool mentions(const Status& status, const std::string& text) {
  return status.reason.find(text) != std::string::npos;
}

TEST(QosExperiment, ADeviceThatDoesNotComeUpFailsItsModesRunsAndTheRestGoOn) {
  // A review: start_device threw out of run_experiment and main printed it and wrote nothing, losing
  // every run measured before it (a later mode's simgpud, or a restart that failed).
  testing::TempDir out("qos-experiment-itest");
  Options o;
  o.out_dir = out.path().string();
  o.policies = {"none", "baymax"};
  o.device_modes = {"no-such-mode", "nor-this-one"};
  o.loads = {0.4};
  o.be_mixes = {"resnet+recsys"};
  QosRig rig(out.path(), o.time_scale);
  const std::atomic<bool> interrupted{false};
  Results results;
  ASSERT_NO_THROW(results = run_experiment(rig, o, interrupted));

  EXPECT_FALSE(results.interrupted);
  ASSERT_EQ(results.calibrations.size(), 2u) << "both modes recorded";
  EXPECT_EQ(results.calibrations[1].device_mode, "nor-this-one");
  ASSERT_EQ(results.standalone_lc.size(), 2u);
  ASSERT_EQ(results.standalone_be.size(), 4u);
  ASSERT_EQ(results.standalone_mixes.size(), 2u);
  ASSERT_EQ(results.trainings.size(), 2u) << "each mode's predictor training, not made, is failed too";
  EXPECT_FALSE(results.trainings[1].status.ok);
  ASSERT_EQ(results.cells.size(), 4u);
  const Status& calibration = results.calibrations[0].status;
  EXPECT_FALSE(calibration.ok);
  EXPECT_TRUE(mentions(calibration, "device mode no-such-mode stopped: simgpud (no-such-mode) did not come up"))
      << calibration.reason;
  EXPECT_EQ(calibration.reason.find('\n'), std::string::npos) << "one line, for the table";
  for (const CellResult& cell : results.cells) {
    EXPECT_FALSE(cell.status.ok);
    EXPECT_TRUE(mentions(cell.status, "simgpud (" + cell.cell.device_mode + ") did not come up")) << cell.status.reason;
  }
  EXPECT_EQ(failed_runs(results), 2u * (1 + 1 + 2 + 1 + 1 + 2)) << "every run of both modes counts as failed";
}

TEST(QosExperiment, ARunWhoseDeviceCannotRestartFailsAloneWithoutThrowing) {
  // A review: BenchRuns::measure called rig_.run outside its try, and the rig throws when simgpud
  // crashed and does not come back (or a process cannot be spawned).
  testing::TempDir out("qos-experiment-itest");
  QosRig rig(out.path(), 4.0);
  EXPECT_THROW(rig.start_device("no-such-mode"), std::runtime_error);
  const std::atomic<bool> interrupted{false};
  BenchRuns runs(rig, interrupted, 1);
  bool used = false;
  Status status;
  ASSERT_NO_THROW(status = runs.measure("alone-lc", {}, std::nullopt, 1.0, [&](const RunOutcome&) { used = true; }));
  EXPECT_FALSE(status.ok);
  EXPECT_TRUE(mentions(status, "simgpud (no-such-mode) did not come up")) << status.reason;
  EXPECT_FALSE(used) << "no result to read";
}

}  // namespace
}  // namespace gpuqos::qos
