// `gpuqos eval`: accuracy on held-out measurements (test files, K-fold CV, or a work split).
#include <cstdio>
#include <sstream>

#include "eval_report.h"
#include "gpuqos/predictor/commands.h"
#include "load_inputs.h"

namespace gpuqos::predictor {

namespace {

constexpr int kUsageError = 2;

// The problem with a combination of options, or "".
std::string check(const EvalOptions& o) {
  const int modes = int(!o.test.empty()) + int(o.cv_folds.has_value()) + int(o.split_by_work.has_value());
  if (o.train.empty()) return "no --train files";
  if (modes != 1) return "give exactly one of --test FILE..., --cv K or --split-by-work FRACTION";
  if (o.cv_folds && *o.cv_folds < 2) return "--cv needs at least 2 folds (got " + std::to_string(*o.cv_folds) + ")";
  if (o.split_by_work && !(*o.split_by_work > 0 && *o.split_by_work < 1)) {
    // Said with its alias: the README spells it --extrapolate.
    char got[32];
    std::snprintf(got, sizeof got, "%g", *o.split_by_work);
    return "--split-by-work (--extrapolate) needs a fraction in (0, 1) (got " + std::string(got) + ")";
  }
  if (o.sms == 0) return "--sms must be positive";
  return "";
}

}  // namespace

int run_eval(const EvalOptions& options, std::ostream& out, std::ostream& err) {
  if (const std::string problem = check(options); !problem.empty()) {
    err << "gpuqos eval: " << problem << "\n";
    return kUsageError;
  }
  for (const std::string& file : options.test) {
    if (const auto same = detail::same_file_among(file, options.train)) {
      err << "gpuqos eval: warning: --test " << file << " is also a --train file (" << *same
          << "): the model is scored on measurements it was trained on\n";
    }
  }
  const ReadOptions read_options{options.csv_args};
  SampleSet train, test;
  if (!detail::load_inputs(options.train, read_options, train, err, "gpuqos eval") ||
      !detail::load_inputs(options.test, read_options, test, err, "gpuqos eval"))
    return 1;
  // A model trained on nothing scores only the predictor's defaults: said, not scored as if trained
  // (an audit: a header-only --train file exited 0 with figures).
  if (train.kernels.empty() && train.copies.empty()) {
    err << "gpuqos eval: the --train files hold no measurements: there is nothing to train a model on\n";
    return 1;
  }
  // More folds than measurements leaves folds empty: nothing to learn from them, and a huge K only
  // spins through empty folds for ever.
  if (const std::size_t rows = train.kernels.size() + train.copies.size(); options.cv_folds &&
                                                                           static_cast<std::size_t>(*options.cv_folds) > rows) {
    err << "gpuqos eval: --cv " << *options.cv_folds << " is more folds than the " << rows
        << " measurements read (give at most " << rows << ")\n";
    return kUsageError;
  }
  EvalSettings settings;
  settings.config.sm_count = options.sms;
  // As gpuqos train does, so both model the same names.
  if (const auto left_out = keep_most_measured_names(train, settings.config.max_kernels)) {
    err << "gpuqos eval: warning: " << *left_out << "\n";
  }
  settings.min_copy_bytes = options.min_copy_bytes;
  EvalResult result;
  std::ostringstream mode;
  if (options.cv_folds) {
    mode << *options.cv_folds << "-fold cross-validation";
    result = cross_validate(train, *options.cv_folds, settings);
  } else if (options.split_by_work) {
    mode << "extrapolation: trained on the " << *options.split_by_work * 100 << "% least work, tested on the rest";
    auto [low, high] = split_by_work(train, *options.split_by_work);
    result = evaluate(low, high, settings);
  } else {
    mode << "train/test";
    result = evaluate(train, test, settings);
  }
  if (options.min_copy_bytes > 0) mode << " (copies >= " << options.min_copy_bytes << " bytes scored)";
  if (result.kernels.count + result.copies.count == 0) err << "gpuqos eval: warning: nothing to evaluate\n";
  if (options.json) {
    out << detail::eval_json(result, mode.str()) << "\n";
  } else {
    detail::print_eval_text(result, mode.str(), options.per_kernel, out);
  }
  return 0;
}

}  // namespace gpuqos::predictor
