// gpuqos-bench qos's per-cell arithmetic: loads and rates, targets, violations, busy fractions from
// simgpu-stat answers, the BE share of the ideal, and a cell evaluated against its references.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cell_math.h"
#include "results.h"

namespace gpuqos::qos {
namespace {

TEST(QosCellMath, LoadAndRateAreInverse) {
  // 0.4 of the time in flight with 16 ms queries: 25 queries per second.
  EXPECT_DOUBLE_EQ(arrival_rate_per_s(0.4, 16.0), 25.0);
  EXPECT_DOUBLE_EQ(lc_load_of(25.0, 16.0), 0.4);
  EXPECT_THROW(arrival_rate_per_s(0.4, 0.0), std::invalid_argument);
  EXPECT_THROW(arrival_rate_per_s(0.0, 16.0), std::invalid_argument);
}

TEST(QosCellMath, TargetIsFactorTimesStandaloneP99) { EXPECT_DOUBLE_EQ(target_ms(1.5, 20.0), 30.0); }

// A run with the LC lasts --duration, or long enough for the minimum of queries at its rate.
TEST(QosCellMath, AnLcRunLastsLongEnoughForItsMinimumOfQueries) {
  EXPECT_DOUBLE_EQ(lc_run_duration_s(10, 12.5, 450), 36.0) << "load 0.2: 450 arrivals take 36 s";
  EXPECT_DOUBLE_EQ(lc_run_duration_s(10, 50.0, 450), 10.0) << "450 arrive within --duration";
  EXPECT_DOUBLE_EQ(lc_run_duration_s(10, 12.5, 0), 10.0) << "no minimum";
  EXPECT_DOUBLE_EQ(lc_run_duration_s(10, 0.0, 450), 10.0) << "no rate: --duration";
}

TEST(QosCellMath, ViolationsAreStrictlyOverTarget) {
  const std::vector<double> latency{10, 20, 30, 30.0001, 50};
  EXPECT_DOUBLE_EQ(violation_fraction(latency, 30.0), 0.4);  // 30 itself meets the target
  EXPECT_DOUBLE_EQ(violation_fraction(latency, 100.0), 0.0);
  EXPECT_DOUBLE_EQ(violation_fraction(latency, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(violation_fraction({}, 1.0), 0.0);
}

TEST(QosCellMath, BusyFractionFromTwoStatAnswers) {
  const auto stat = [](std::uint64_t now, std::uint64_t busy) {
    return nlohmann::json{{"now_ns", now}, {"clients", 2}, {"devices", {{{"compute_busy_ns", busy}, {"h2d_busy_ns", 7}}}}};
  };
  const DeviceSample a = parse_device_sample(stat(1'000'000'000, 200'000'000));
  const DeviceSample b = parse_device_sample(stat(3'000'000'000, 700'000'000));
  EXPECT_EQ(a.now_ns, 1'000'000'000u);
  EXPECT_EQ(b.compute_busy_ns, 700'000'000u);
  EXPECT_DOUBLE_EQ(compute_busy_fraction(a, b), 0.25);
  EXPECT_DOUBLE_EQ(compute_busy_fraction(b, a), 0.0);  // backwards window
  EXPECT_DOUBLE_EQ(compute_busy_fraction(a, a), 0.0);  // empty window
  EXPECT_THROW(parse_device_sample(nlohmann::json{{"now_ns", 1}, {"devices", nlohmann::json::array()}}), std::runtime_error);
  EXPECT_THROW(parse_device_sample(nlohmann::json{{"devices", {{{"compute_busy_ns", 1}}}}}), std::runtime_error);
}

TEST(QosCellMath, BeFractionOfIdealIsMeanShareOverLeftover) {
  EXPECT_DOUBLE_EQ(fraction_of_standalone(1.5, 2.0).value(), 0.75);
  // A review: a missing or failed reference (0 it/s) gave 0 %, read as a BE job starved.
  EXPECT_FALSE(fraction_of_standalone(1.5, 0.0)) << "no reference: no figure, not 0";
  // The LC keeps the GPU busy 20 %: 80 % is left; a BE job at 60 % of standalone got 75 % of that.
  const std::vector<double> one{0.6};
  EXPECT_DOUBLE_EQ(be_fraction_of_ideal(one, 0.2).value(), 0.75);
  // A mix: the mean over its jobs, (0.6 + 0.2) / 2 = 0.4, over the same leftover.
  const std::vector<double> mix{0.6, 0.2};
  EXPECT_DOUBLE_EQ(be_fraction_of_ideal(mix, 0.2).value(), 0.5);
  EXPECT_FALSE(be_fraction_of_ideal({}, 0.2));
  EXPECT_FALSE(be_fraction_of_ideal(one, 1.0)) << "no leftover at all: no share of it";
}

// Values 1..n in shuffled order: the interval's ends are the order statistics' ranks. The median's
// of 100 at 95 % is the textbook (40th, 61st); a p99's needs 368 values for an upper end
// (0.99^368 < 2.5 % < 0.99^367). Ranks of the others from the exact binomial (Python, fractions).
TEST(QosCellMath, QuantileIntervalIsTheBinomialOrderStatistics) {
  const auto ranks = [](std::size_t n, double q) {
    std::vector<double> values(n);
    for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<double>((i * 7919) % n + 1);  // a permutation
    return quantile_interval(values, q, 0.95);
  };
  const QuantileInterval median = ranks(100, 0.5);
  EXPECT_EQ(median.low, 40.0);
  EXPECT_EQ(median.high, 61.0);
  const QuantileInterval few = ranks(118, 0.99);  // a 10-s run at load 0.2, --min-queries 0
  EXPECT_EQ(few.low, 114.0);
  EXPECT_FALSE(few.high) << "118 queries cannot bound a p99 from above";
  EXPECT_FALSE(ranks(367, 0.99).high);
  EXPECT_EQ(ranks(368, 0.99).high, 368.0) << "the largest, and only just";
  EXPECT_EQ(ranks(400, 0.99).low, 392.0);
  EXPECT_EQ(ranks(400, 0.99).high, 400.0);
  const QuantileInterval many = ranks(1000, 0.99);
  EXPECT_EQ(many.low, 983.0);
  EXPECT_EQ(many.high, 997.0);
  EXPECT_FALSE(ranks(3, 0.5).low) << "3 values: P(all 3 above the median) = 12.5 % > 2.5 %";
  EXPECT_THROW(quantile_interval({}, 0.99, 0.95), std::invalid_argument);
  const std::vector<double> one{1.0};
  EXPECT_THROW(quantile_interval(one, 1.0, 0.95), std::invalid_argument);
  EXPECT_THROW(quantile_interval(one, 0.99, 1.0), std::invalid_argument);
}

TEST(QosCellMath, EvaluateCellAgainstItsReferences) {
  const Cell cell{"priority", "fifo", 0.4, "resnet+recsys"};
  StandaloneLc lc_reference;
  lc_reference.device_mode = "fifo";
  lc_reference.lc_load = 0.4;
  lc_reference.rate_per_s = 25;
  lc_reference.gpu_busy_fraction = 0.2;
  lc_reference.target_ms = 30;
  std::vector<StandaloneBe> be_references(3);
  be_references[0].device_mode = "fifo";
  be_references[0].job = "resnet-train";
  be_references[0].run.iterations_per_s = 2.0;
  be_references[1].device_mode = "timeslice";  // another mode's: never used for this cell
  be_references[1].job = "recsys-train";
  be_references[1].run.iterations_per_s = 100.0;
  be_references[2].device_mode = "fifo";
  be_references[2].job = "recsys-train";
  be_references[2].run.iterations_per_s = 0.5;

  CellMeasurement m;
  m.lc.queries = 4;
  m.lc.p99_ms = 45;
  m.lc.latency_ms = {10, 20, 31, 45};
  m.be = {{"resnet-train", 10, 1.2}, {"recsys-train", 2, 0.1}};
  m.gpu_busy_fraction = 0.9;

  // The mix alone together: resnet 1.5 it/s, recsys 0.4 beside it; another mode's and a failed one
  // are never used.
  std::vector<StandaloneMix> mix_references(3);
  mix_references[0].device_mode = "timeslice";
  mix_references[0].be_mix = "resnet+recsys";
  mix_references[0].runs = {{"resnet-train", 1, 100.0}, {"recsys-train", 1, 100.0}};
  mix_references[1].device_mode = "fifo";
  mix_references[1].be_mix = "resnet+recsys";
  mix_references[1].runs = {{"resnet-train", 1, 100.0}, {"recsys-train", 1, 100.0}};
  mix_references[1].status = {false, "crashed", "", ""};
  mix_references[2].device_mode = "fifo";
  mix_references[2].be_mix = "resnet+recsys";
  mix_references[2].runs = {{"resnet-train", 15, 1.5}, {"recsys-train", 4, 0.4}};

  const CellResult r = evaluate_cell(cell, m, lc_reference, be_references, mix_references);
  EXPECT_TRUE(r.status.ok);
  EXPECT_DOUBLE_EQ(r.target_ms, 30);
  EXPECT_DOUBLE_EQ(r.rate_per_s, 25);
  EXPECT_DOUBLE_EQ(r.violation_fraction, 0.5);
  // Of 4 queries, 2 above the p99 has probability 0.06 %: the third-smallest is under it.
  EXPECT_EQ(r.lc_p99_ci95.low, 31.0);
  EXPECT_FALSE(r.lc_p99_ci95.high) << "4 queries cannot bound a p99 from above";
  ASSERT_EQ(r.be.size(), 2u);
  EXPECT_EQ(r.status.caveat, "") << "every reference there";
  EXPECT_DOUBLE_EQ(r.be[0].fraction_of_standalone.value(), 0.6);
  EXPECT_DOUBLE_EQ(r.be[1].standalone_iterations_per_s.value(), 0.5);
  EXPECT_DOUBLE_EQ(r.be[1].fraction_of_standalone.value(), 0.2);
  EXPECT_DOUBLE_EQ(r.be_fraction_of_ideal.value(), 0.5);  // (0.6 + 0.2) / 2 / (1 - 0.2)
  EXPECT_DOUBLE_EQ(r.be[0].mix_alone_iterations_per_s.value(), 1.5);
  EXPECT_DOUBLE_EQ(r.be[0].fraction_of_mix_alone.value(), 0.8);
  EXPECT_DOUBLE_EQ(r.be[1].fraction_of_mix_alone.value(), 0.25);
  ASSERT_TRUE(r.be_fraction_of_ideal_together);
  EXPECT_DOUBLE_EQ(*r.be_fraction_of_ideal_together, 0.65625);  // (0.8 + 0.25) / 2 / (1 - 0.2)
  EXPECT_DOUBLE_EQ(r.gpu_busy_fraction, 0.9);

  // One job: its mix alone is its standalone run.
  CellMeasurement one = m;
  one.be.resize(1);
  const CellResult single = evaluate_cell({"priority", "fifo", 0.4, "resnet"}, one, lc_reference, be_references, {});
  EXPECT_DOUBLE_EQ(single.be[0].mix_alone_iterations_per_s.value(), 2.0);
  ASSERT_TRUE(single.be_fraction_of_ideal_together);
  EXPECT_DOUBLE_EQ(*single.be_fraction_of_ideal_together, single.be_fraction_of_ideal.value());
  // No usable run of the mix alone: no figure, rather than a made-up one, and the cell says why.
  const CellResult missing = evaluate_cell(cell, m, lc_reference, be_references, {mix_references[1]});
  EXPECT_FALSE(missing.be[0].fraction_of_mix_alone);
  EXPECT_FALSE(missing.be[0].mix_alone_iterations_per_s);
  EXPECT_FALSE(missing.be_fraction_of_ideal_together);
  EXPECT_TRUE(missing.status.ok);
  EXPECT_NE(missing.status.caveat.find("no BE % of ideal (mix alone) for resnet-train: resnet+recsys alone together "
                                       "failed: crashed"),
            std::string::npos)
      << missing.status.caveat;
  EXPECT_DOUBLE_EQ(missing.be_fraction_of_ideal.value(), 0.5) << "the standalone references are there";

  // A review: a BE job whose standalone run failed (or is missing, or made nothing) got 0 % of it,
  // and pulled the cell's BE % of ideal down to a number computed from a zero reference.
  std::vector<StandaloneBe> failed_recsys = be_references;
  failed_recsys[2].run.iterations_per_s = 0;
  failed_recsys[2].status = {false, "recsys replayer crashed", "/x/alone.log", "tail"};
  for (const auto& [references, why] :
       std::vector<std::pair<std::vector<StandaloneBe>, std::string>>{
           {failed_recsys, "recsys-train alone failed: recsys replayer crashed"},
           {{be_references[0], be_references[1]}, "recsys-train alone was not run"},
           {{be_references[0], be_references[1], StandaloneBe{"fifo", "recsys-train", {}, 0, {}}},
            "recsys-train alone made no iteration"}}) {
    const CellResult unreferenced = evaluate_cell(cell, m, lc_reference, references, mix_references);
    EXPECT_TRUE(unreferenced.status.ok) << why;
    EXPECT_EQ(unreferenced.status.caveat, "no BE % of standalone or of ideal: " + why);
    EXPECT_FALSE(unreferenced.be[1].standalone_iterations_per_s) << why;
    EXPECT_FALSE(unreferenced.be[1].fraction_of_standalone) << why;
    EXPECT_FALSE(unreferenced.be_fraction_of_ideal) << "not a mean over the jobs that have one: " << why;
    EXPECT_DOUBLE_EQ(unreferenced.be[0].fraction_of_standalone.value(), 0.6) << "resnet's reference is there";
    EXPECT_DOUBLE_EQ(unreferenced.be_fraction_of_ideal_together.value(), 0.65625) << "the mix alone is there";
  }
  // The LC alone kept the GPU busy throughout: no idle time to have a share of.
  StandaloneLc busy = lc_reference;
  busy.gpu_busy_fraction = 1.0;
  const CellResult no_leftover = evaluate_cell(cell, m, busy, be_references, mix_references);
  EXPECT_FALSE(no_leftover.be_fraction_of_ideal);
  EXPECT_FALSE(no_leftover.be_fraction_of_ideal_together);
  EXPECT_EQ(no_leftover.status.caveat, "no BE % of ideal: the LC alone left the GPU no idle time");

  const CellResult f = failed_cell(cell, lc_reference, {false, "gpuqosd exited at startup", "x.log", "tail"});
  EXPECT_FALSE(f.status.ok);
  EXPECT_DOUBLE_EQ(f.target_ms, 30);
  EXPECT_TRUE(f.be.empty());
}

}  // namespace
}  // namespace gpuqos::qos
