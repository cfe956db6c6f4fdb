// Error summaries, work splits, cross-validation and the train / eval commands end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <fstream>
#include <iterator>
#include <sstream>

#include "gpuqos/predictor/commands.h"
#include "gpuqos/predictor/evaluation.h"
#include "gpuqos/predictor/store.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::predictor {
namespace {

using ::testing::HasSubstr;

TEST(Evaluation, SummaryUsesNearestRank) {
  const ErrorSummary s = summarize_errors({0.1, 0.3, 0.2, 0.0, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9});
  EXPECT_EQ(s.count, 10u);
  EXPECT_DOUBLE_EQ(s.median_ape, 0.4);
  EXPECT_DOUBLE_EQ(s.p90_ape, 0.8);
  EXPECT_NEAR(s.mape, 0.45, 1e-12);
  EXPECT_EQ(summarize_errors({}).count, 0u);
}

KernelSample gemm(std::uint64_t b, std::uint64_t m, double ns) {
  KernelSample k{"g", {}, ns};
  k.shape.arg_count = 2;
  k.shape.args = {b, m};
  return k;
}

TEST(Evaluation, SplitByWorkPutsTheMostWorkInTheTestSet) {
  SampleSet all;
  for (std::uint64_t i = 10; i >= 1; --i) all.kernels.push_back(gemm(i, 3, 1));
  for (std::uint64_t i = 1; i <= 5; ++i) all.copies.push_back({{CopyDirection::d2d, HostMemory::none, 100 * i}, 1});
  const auto [low, high] = split_by_work(all, 0.8);
  ASSERT_EQ(low.kernels.size(), 8u);
  ASSERT_EQ(high.kernels.size(), 2u);
  for (const auto& k : low.kernels) EXPECT_LE(work_of(k), 24);
  EXPECT_EQ(work_of(high.kernels[0]), 27);
  EXPECT_EQ(work_of(high.kernels[1]), 30);
  ASSERT_EQ(high.copies.size(), 1u);
  EXPECT_EQ(high.copies[0].copy.bytes, 500u);
}

TEST(Evaluation, CrossValidationPredictsEverySampleOnce) {
  SampleSet all;
  for (std::uint64_t i = 1; i <= 200; ++i) all.kernels.push_back(gemm(i % 7 + 1, 64 * i, 2000.0 + 3.0 * double((i % 7 + 1) * 64 * i)));
  for (std::uint64_t i = 1; i <= 50; ++i) all.copies.push_back({{CopyDirection::h2d, HostMemory::pinned, 4096 * i}, 4000.0 + 4096.0 * double(i) / 12});
  const EvalResult r = cross_validate(all, 5, EvalSettings{});
  EXPECT_EQ(r.kernels.count, 200u);
  EXPECT_EQ(r.copies.count, 50u);
  EXPECT_LT(r.kernels.median_ape, 0.01);  // linear in work: the regression is exact
  EXPECT_LT(r.copies.mape, 0.001);
  EXPECT_EQ(r.per_kernel.at("g").count, 200u);
  EXPECT_EQ(r.per_copy_class.at("h2d/pinned").count, 50u);
  EvalSettings only_large;
  only_large.min_copy_bytes = 4096 * 26;
  EXPECT_EQ(cross_validate(all, 5, only_large).copies.count, 25u);
}

TEST(Commands, TrainWritesAProfileAndEvalPrintsJson) {
  const testing::TempDir dir;
  std::string csv = "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z,M,N\n";
  for (int i = 1; i <= 60; ++i)
    csv += std::to_string(0.01 + 1e-6 * i * i * 16) + ",k," + std::to_string(i) + ",1,1,128,1,1," + std::to_string(i * 4) + ",16\n";
  csv += "oops,k,1,1,1,128,1,1,4,16\n";
  const auto table = dir.write("t.csv", csv);
  std::ostringstream out, err;
  const TrainOptions train{{table.string()}, (dir.path() / "p.gqp").string(), {"M", "N"}, 108};
  ASSERT_EQ(run_train(train, out, err), 0) << err.str();
  EXPECT_THAT(err.str(), HasSubstr("t.csv: CSV table, 60 kernels, 0 copies and memsets, 1 skipped"));
  EXPECT_THAT(err.str(), HasSubstr("t.csv:62: column 'Latency': 'oops' is not a number"));
  EXPECT_THAT(out.str(), HasSubstr("trained on 60 kernels"));
  const LoadedProfile loaded = load_profile(dir.path() / "p.gqp", {});
  EXPECT_EQ(loaded.warning, std::nullopt);
  EXPECT_EQ(loaded.predictor.kernel_count(), 1u);

  std::ostringstream json_out, json_err;
  EvalOptions eval;
  eval.train = {table.string()};
  eval.cv_folds = 3;
  eval.csv_args = {"M", "N"};
  eval.json = true;
  ASSERT_EQ(run_eval(eval, json_out, json_err), 0) << json_err.str();
  const auto j = nlohmann::json::parse(json_out.str());
  for (const char* part : {"kernels", "copies"})
    for (const char* key : {"median_ape", "mape", "p90_ape", "count"}) EXPECT_TRUE(j.at(part).contains(key)) << part << "." << key;
  EXPECT_EQ(j["kernels"]["count"], 60);
  EXPECT_EQ(j["copies"]["count"], 0);
  EXPECT_TRUE(j["copies"]["mape"].is_null()) << "nothing scored is not a perfect score: " << j["copies"].dump();
  EXPECT_LT(j["kernels"]["median_ape"].get<double>(), 0.05);
}

// A table (or a Kineto trace) of demangled names trains a store gpuqosd never finds those kernels
// in: it looks kernels up by their symbols, as the shim names them, and does not demangle what
// clients send. Said, with how to get names it uses; symbols are not.
TEST(Commands, TrainSaysWhenKernelNamesAreDemangled) {
  const testing::TempDir dir;
  const auto table = dir.write("t.csv", "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z\n"
                                        "0.01,\"void foo<int>(int*)\",1,1,1,128,1,1\n"
                                        "0.01,_Z3barv,1,1,1,128,1,1\n");
  std::ostringstream out, err;
  ASSERT_EQ(run_train(TrainOptions{{table.string()}, (dir.path() / "p.gqp").string(), {}, 108}, out, err), 0)
      << err.str();
  EXPECT_THAT(err.str(), HasSubstr("1 of 2 kernel names are demangled (such as \"void foo<int>(int*)\")"));
  EXPECT_THAT(err.str(), HasSubstr("GPUQOS_PROFILE"));
  const auto symbols = dir.write("s.csv", "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z\n"
                                          "0.01,_Z3barv,1,1,1,128,1,1\n");
  std::ostringstream out2, err2;
  ASSERT_EQ(run_train(TrainOptions{{symbols.string()}, (dir.path() / "q.gqp").string(), {}, 108}, out2, err2), 0);
  EXPECT_THAT(err2.str(), Not(HasSubstr("demangled")));
}

// More kernel names than a store holds: the most measured are kept and what is left out is said (a
// review: the shuffle decided which names the predictor refused, silently, exit 0).
TEST(Commands, TrainKeepsTheMostMeasuredNamesAStoreHoldsAndSaysWhatItLeftOut) {
  const testing::TempDir dir;
  constexpr int kMax = 4096;  // PredictorConfig::max_kernels
  std::string csv = "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z\n";
  for (int i = 0; i < kMax + 4; ++i) {
    for (int row = 0; row < (i < kMax ? 2 : 1); ++row) csv += "0.01,n" + std::to_string(i) + ",1,1,1,128,1,1\n";
  }
  const auto table = dir.write("t.csv", csv);
  std::ostringstream out, err;
  ASSERT_EQ(run_train(TrainOptions{{table.string()}, (dir.path() / "p.gqp").string(), {}, 108}, out, err), 0)
      << err.str();
  EXPECT_THAT(err.str(), HasSubstr("4100 kernel names, more than a store holds (4096): the 4 least measured (4 "
                                   "measurements, at most 1 each) are left out"));
  const LoadedProfile loaded = load_profile(dir.path() / "p.gqp", {});
  ASSERT_EQ(loaded.warning, std::nullopt);
  EXPECT_EQ(loaded.predictor.kernel_count(), std::size_t{kMax});
  int missing = 0;
  for (int i = 0; i < kMax; ++i) missing += loaded.predictor.kernel("n" + std::to_string(i)) == nullptr;
  EXPECT_EQ(missing, 0) << "names measured twice left out for names measured once";
  std::ostringstream eval_out, eval_err;
  EvalOptions eval;
  eval.train = {table.string()};
  eval.cv_folds = 2;
  ASSERT_EQ(run_eval(eval, eval_out, eval_err), 0) << eval_err.str();
  EXPECT_THAT(eval_err.str(), HasSubstr("gpuqos eval: warning: 4100 kernel names, more than a store holds (4096)"))
      << "eval models the names train does";
}

TEST(Commands, UsageAndInputErrors) {
  std::ostringstream out, err;
  EvalOptions both;
  both.train = {"a.csv"};
  both.cv_folds = 5;
  both.test = {"b.csv"};
  EXPECT_EQ(run_eval(both, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("give exactly one of --test"));
  EvalOptions missing;
  missing.train = {"/nonexistent/a.csv"};
  missing.cv_folds = 5;
  EXPECT_EQ(run_eval(missing, out, err), 1);
  EXPECT_THAT(err.str(), HasSubstr("gpuqos eval: /nonexistent/a.csv")) << "said by the command, as its others are";
  EXPECT_EQ(run_train(TrainOptions{{}, "p", {}, 108}, out, err), 2);
  EvalOptions no_folds;
  no_folds.train = {"a.csv"};
  no_folds.cv_folds = -3;
  EXPECT_EQ(run_eval(no_folds, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--cv needs at least 2 folds (got -3)"));
  no_folds.cv_folds = 0;  // given as 0: said as such, not taken for no mode at all
  EXPECT_EQ(run_eval(no_folds, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--cv needs at least 2 folds (got 0)"));
  // A review: --extrapolate 1.5, the README's spelling, was answered about --split-by-work alone.
  EvalOptions split;
  split.train = {"a.csv"};
  split.split_by_work = 1.5;
  EXPECT_EQ(run_eval(split, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--split-by-work (--extrapolate) needs a fraction in (0, 1) (got 1.5)"));
  std::ostringstream train_err;
  EXPECT_EQ(run_train(TrainOptions{{"/nonexistent/t.jsonl"}, "p", {}, 108}, out, train_err), 1);
  EXPECT_THAT(train_err.str(), HasSubstr("gpuqos train: /nonexistent/t.jsonl"));
}

// A --train file with a header and no measurement: said, not scored as a model trained on nothing
// (an audit: it exited 0 with figures for the predictor's defaults).
TEST(Commands, EvalRefusesTrainingFilesWithoutMeasurements) {
  const testing::TempDir dir;
  const auto empty = dir.write("empty.jsonl", "{\"format\":\"gpuqos-profile\",\"version\":1}\n");
  const auto test = dir.write("test.jsonl", "{\"format\":\"gpuqos-profile\",\"version\":1}\n"
                                            R"({"kind":"copy","direction":"h2d","bytes":4,"start_ns":0,"end_ns":9})" "\n");
  std::ostringstream out, err;
  EvalOptions eval;
  eval.train = {empty.string()};
  eval.test = {test.string()};
  EXPECT_EQ(run_eval(eval, out, err), 1) << err.str();
  EXPECT_THAT(err.str(), HasSubstr("the --train files hold no measurements"));
  EXPECT_EQ(out.str(), "");
}

// --out naming a --from file would replace the measurements with the store: refused.
TEST(Commands, TrainRefusesToWriteOverItsInput) {
  const testing::TempDir dir;
  const auto table = dir.write("t.csv", "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z\n0.01,k,1,1,1,128,1,1\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_train(TrainOptions{{table.string()}, table.string(), {}, 108}, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--out " + table.string() + " is one of the --from files"));
  std::ifstream kept(table);
  std::string first;
  std::getline(kept, first);
  EXPECT_EQ(first, "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z");
}

// --out naming a file that is not a store (another measurement file, a config) would replace it: refused.
// A store is replaced, as retraining does.
TEST(Commands, TrainRefusesToReplaceAFileThatIsNotAStore) {
  const testing::TempDir dir;
  const auto table = dir.write("t.csv", "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z\n0.01,k,1,1,1,128,1,1\n");
  const auto other = dir.write("other.jsonl", "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"j\",\"pid\":1}\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_train(TrainOptions{{table.string()}, other.string(), {}, 108}, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--out " + other.string() + " is not a predictor store but a gpuqos profile"));
  std::ifstream kept(other);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}),
            "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"j\",\"pid\":1}\n");

  const auto store = dir.path() / "s.gqp";
  EXPECT_EQ(run_train(TrainOptions{{table.string()}, store.string(), {}, 108}, out, err), 0) << err.str();
  EXPECT_EQ(run_train(TrainOptions{{table.string()}, store.string(), {}, 108}, out, err), 0) << err.str();
}

// A user test: --out /dev/null (as root) and --out at a FIFO replaced them with a store file; a
// missing directory was found only after all the reading and training; a file given twice counted
// twice. Where the store goes is checked first, and each input is read once.
TEST(Commands, TrainChecksWhereTheStoreGoesFirstAndReadsEachInputOnce) {
  const testing::TempDir dir;
  // Its report ("t.csv: CSV table, ...") is printed only once it is read.
  const auto table = dir.write("t.csv", "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z\n0.01,k,1,1,1,128,1,1\n");
  const auto fifo = dir.path() / "fifo.gqp";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (const auto& [where, message] : std::vector<std::pair<std::string, std::string>>{
           {fifo.string(), "is a FIFO, not a store file: nothing is saved over it"},
           {(dir.path() / "no" / "s.gqp").string(), "its directory " + (dir.path() / "no").string() + " does not exist"},
           {dir.path().string() + "/", "names a directory; give a file in it"}}) {
    std::ostringstream out, err;
    EXPECT_EQ(run_train(TrainOptions{{table.string()}, where, {}, 108}, out, err), 2) << where;
    EXPECT_THAT(err.str(), HasSubstr("gpuqos train: --out " + where + ": "));
    EXPECT_THAT(err.str(), HasSubstr(message));
    EXPECT_THAT(err.str(), ::testing::Not(HasSubstr("t.csv:"))) << "refused before reading";
  }
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));

  std::ostringstream out, err;
  const auto store = dir.path() / "s.gqp";
  ASSERT_EQ(run_train(TrainOptions{{table.string(), (dir.path() / "." / "t.csv").string()}, store.string(), {}, 108},
                      out, err),
            0)
      << err.str();
  EXPECT_THAT(err.str(), HasSubstr("is the same file as " + table.string() + ": read once"));
  EXPECT_THAT(out.str(), HasSubstr("trained on 1 kernels"));

  // A killed process's records beside a profile given: said, not read unasked.
  const auto left = dir.write("t.csv.tmp.77", "not read");
  std::ostringstream noted_out, noted;
  ASSERT_EQ(run_train(TrainOptions{{table.string()}, store.string(), {}, 108}, noted_out, noted), 0) << noted.str();
  EXPECT_THAT(noted.str(), HasSubstr("note: " + left.string() + " holds the records of a process of " + table.string()));
  EXPECT_EQ(unfinished_profiles(table.string()), std::vector<std::string>{left.string()});

  std::ostringstream eval_out, eval_err;
  EvalOptions eval;
  eval.train = {table.string()};
  eval.test = {table.string()};
  run_eval(eval, eval_out, eval_err);
  EXPECT_THAT(eval_err.str(), HasSubstr("--test " + table.string() + " is also a --train file"));
}

// Every copy class trained on is in the report: one whose sizes were too close for a line (the
// BERT query's copies are all of one size) says what answers it instead of being left out.
TEST(Commands, TrainReportsEveryCopyClassItLearned) {
  const testing::TempDir dir;
  std::string profile = "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"j\",\"pid\":1}\n";
  for (int i = 0; i < 8; ++i) {
    const std::string start = std::to_string(1'000'000 * (i + 1));
    profile += "{\"kind\":\"copy\",\"direction\":\"d2h\",\"host_memory\":\"pinned\",\"bytes\":4096,\"start_ns\":" +
               start + ",\"end_ns\":" + std::to_string(1'000'000 * (i + 1) + 3000) + "}\n";
    const std::uint64_t bytes = std::uint64_t{1} << (12 + i);  // 4 KiB to 512 KiB: a line
    profile += "{\"kind\":\"copy\",\"direction\":\"h2d\",\"host_memory\":\"pinned\",\"bytes\":" +
               std::to_string(bytes) + ",\"start_ns\":" + start + ",\"end_ns\":" +
               std::to_string(1'000'000 * (i + 1) + 2000 + static_cast<std::int64_t>(bytes / 25)) + "}\n";
  }
  const auto input = dir.write("p.jsonl", profile);
  std::ostringstream out, err;
  ASSERT_EQ(run_train(TrainOptions{{input.string()}, (dir.path() / "s.gqp").string(), {}, 108}, out, err), 0)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("  h2d/pinned: latency "));
  EXPECT_THAT(out.str(), HasSubstr("  d2h/pinned: no line (1 size, up to 4096 bytes, too close to tell latency from "
                                   "bandwidth): those sizes at their recorded times"));
}

// A K far above the measurements read (2e9 spun a core for minutes) is refused, with the count.
TEST(Commands, MoreFoldsThanMeasurementsIsRefused) {
  const testing::TempDir dir;
  std::string csv = "Latency,Kernel Name,Grid x,Grid y,Grid z,Block x,Block y,Block z,M,N\n";
  for (int i = 1; i <= 6; ++i) csv += std::to_string(0.01 * i) + ",k," + std::to_string(i) + ",1,1,128,1,1,4,16\n";
  const auto table = dir.write("t.csv", csv);
  std::ostringstream out, err;
  EvalOptions eval;
  eval.train = {table.string()};
  eval.csv_args = {"M", "N"};
  eval.cv_folds = 2'000'000'000;
  EXPECT_EQ(run_eval(eval, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--cv 2000000000 is more folds than the 6 measurements read (give at most 6)"));
}

}  // namespace
}  // namespace gpuqos::predictor
