// `gpuqos train` and `gpuqos eval`: what the CLI runs (scheduler/tools/gpuqos.cpp parses the
// options). Both write results to `out` and diagnostics to `err`; they return the exit status.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gpuqos::predictor {

struct TrainOptions {
  std::vector<std::string> inputs;    // gpuqos profiles, Kineto traces, CSV tables
  std::string out;                    // the profile file to write
  std::vector<std::string> csv_args;  // CSV columns that are scalar args (e.g. B,M,N,K)
  std::uint32_t sms = 108;            // SMs of the GPU the measurements come from
};

struct EvalOptions {
  std::vector<std::string> train;
  std::vector<std::string> test;      // empty with cv_folds or split_by_work
  std::optional<int> cv_folds;        // K-fold cross-validation over the train files (K >= 2)
  std::optional<double> split_by_work;// train on this fraction with the least work, test on the rest
  std::vector<std::string> csv_args;
  std::uint32_t sms = 108;
  std::uint64_t min_copy_bytes = 0;   // score only copies at least this large
  bool json = false;
  bool per_kernel = true;             // text output: one line per kernel name
};

// What processes killed before they could add their records to `profile` left beside it (the
// shim's `<profile>.tmp.<pid>` files, themselves profiles `--from` reads), sorted; for a hint when
// `profile` is missing or given without them.
std::vector<std::string> unfinished_profiles(const std::string& profile);

int run_train(const TrainOptions& options, std::ostream& out, std::ostream& err);
int run_eval(const EvalOptions& options, std::ostream& out, std::ostream& err);

}  // namespace gpuqos::predictor
