// `gpuqos train`: learn a profile from measurement files and save it.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "gpuqos/predictor/candidates.h"
#include "gpuqos/predictor/commands.h"
#include "gpuqos/predictor/evaluation.h"
#include "gpuqos/predictor/store.h"
#include "load_inputs.h"

namespace gpuqos::predictor {

namespace {

constexpr int kUsageError = 2;

void print_kernels(const Predictor& predictor, std::ostream& out) {
  out << "kernels: " << predictor.kernel_count() << " names, " << predictor.stored_samples() << " stored shapes\n";
  for (const std::string& name : predictor.kernel_names()) {
    const KernelModel& k = *predictor.kernel(name);
    const int best = k.best_candidate();
    char model[96] = "name_stats (too few observations to validate)";
    if (best >= 0)
      std::snprintf(model, sizeof model, "%s (validation error ~%.1f%%)", describe_candidate(best).c_str(),
                    (std::exp2(k.scores()[std::size_t(best)].mean_abs_log2_error) - 1) * 100);
    out << "  " << k.observations() << " obs, " << k.store().size() << " shapes, " << model << ": "
        << (name.size() > 80 ? name.substr(0, 77) + "..." : name) << "\n";
  }
}

void print_copies(const Predictor& predictor, std::ostream& out) {
  for (std::size_t d = 0; d < kCopyDirectionCount; ++d) {
    for (std::size_t m = 0; m < kHostMemoryCount; ++m) {
      const CopyLine& line = predictor.copies().line(CopyDirection(d), HostMemory(m));
      char text[240];
      if (!line.fitted()) {
        if (line.remembered_sizes() == 0) continue;
        // Sizes less than 2x apart tell latency from bandwidth apart no better than one size.
        std::snprintf(text, sizeof text,
                      "  %s/%s: no line (%zu size%s, up to %llu bytes, too close to tell latency from bandwidth): "
                      "those sizes at their recorded times, others by the direction's line or the default\n",
                      to_string(CopyDirection(d)), to_string(HostMemory(m)), line.remembered_sizes(),
                      line.remembered_sizes() == 1 ? "" : "s", static_cast<unsigned long long>(line.largest_bytes()));
      } else if (line.learned_bandwidth()) {
        std::snprintf(text, sizeof text, "  %s/%s: latency %.2f us, %.1f GB/s\n", to_string(CopyDirection(d)),
                      to_string(HostMemory(m)), line.latency_ns() / 1000, 1.0 / line.ns_per_byte());
      } else {
        std::snprintf(text, sizeof text,
                      "  %s/%s: latency %.2f us, bandwidth not learned (copies of at most %llu bytes: larger ones "
                      "move at the default bandwidth past that)\n",
                      to_string(CopyDirection(d)), to_string(HostMemory(m)), line.latency_ns() / 1000,
                      static_cast<unsigned long long>(line.largest_bytes()));
      }
      out << text;
    }
  }
}

// Why the store cannot be written at `out` (before any work is done), or "".
std::string out_problem(const std::string& out) {
  const std::filesystem::path given(out);
  if (!given.has_filename()) return "names a directory; give a file in it, e.g. " + (given / "predictor.gqp").string();
  const std::filesystem::path target = save_target(given);
  if (auto refused = why_not_saved_over(target)) return *refused;
  const std::filesystem::path directory = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return "its directory " + directory.string() + " does not exist (or is not a directory)";
  }
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    return "its directory " + directory.string() + " cannot be written (" + std::strerror(errno) + ")";
  }
  return "";
}

// Kineto traces and CSV tables usually hold kernels' demangled names ("void foo<int>(int*)"), but
// the shim names a kernel to gpuqosd by its symbol ("_Z3fooIiEvPT_"), so such names are never
// looked up. gpuqosd does not demangle what clients send (a client's symbol can make the demangler
// run for minutes): said here, where the user can profile under the shim instead.
std::optional<std::string> demangled_names_note(const SampleSet& samples) {
  std::set<std::string_view> names, demangled;
  for (const KernelSample& k : samples.kernels) {
    names.insert(k.name);
    if (k.name.find('(') != std::string::npos) demangled.insert(k.name);
  }
  if (demangled.empty()) return std::nullopt;
  std::string example(*demangled.begin());
  if (example.size() > 80) example = example.substr(0, 77) + "...";
  return std::to_string(demangled.size()) + " of " + std::to_string(names.size()) +
         " kernel names are demangled (such as \"" + example +
         "\"): gpuqosd looks kernels up by their symbols, as the shim names them, so it will not find "
         "these; profile the job under the shim for names it uses (GPUQOS_PROFILE, then gpuqos train on that profile)";
}

}  // namespace

int run_train(const TrainOptions& options, std::ostream& out, std::ostream& err) {
  if (options.inputs.empty() || options.out.empty() || options.sms == 0) {
    err << "gpuqos train: need --from FILE..., --out PROFILE and a positive --sms\n";
    return kUsageError;
  }
  // The store would replace a measurement file it was trained from: refused, not overwritten.
  for (const std::string& input : options.inputs) {
    std::error_code error;
    if (input == options.out || std::filesystem::equivalent(input, options.out, error)) {
      err << "gpuqos train: --out " << options.out << " is one of the --from files; give another path\n";
      return kUsageError;
    }
  }
  if (const auto what = foreign_file(options.out)) {
    err << "gpuqos train: --out " << options.out << " is not a predictor store but " << *what
        << "; it would be replaced: give another path\n";
    return kUsageError;
  }
  // Where the store goes is checked before the inputs are read and trained on, not after.
  if (const std::string problem = out_problem(options.out); !problem.empty()) {
    err << "gpuqos train: --out " << options.out << ": " << problem << "\n";
    return kUsageError;
  }
  SampleSet samples;
  if (!detail::load_inputs(options.inputs, ReadOptions{options.csv_args}, samples, err, "gpuqos train")) return 1;
  if (samples.kernels.empty() && samples.copies.empty()) {
    err << "gpuqos train: no usable measurements in the input files\n";
    return 1;
  }
  PredictorConfig config;
  config.sm_count = options.sms;
  if (const auto left_out = keep_most_measured_names(samples, config.max_kernels)) err << "gpuqos train: " << *left_out << "\n";
  if (const auto demangled = demangled_names_note(samples)) err << "gpuqos train: " << *demangled << "\n";
  const Predictor predictor = train_predictor(samples, config, 1);
  if (const auto error = save_profile(predictor, options.out)) {
    err << "gpuqos train: " << *error << "\n";
    return 1;
  }
  out << "trained on " << samples.kernels.size() << " kernels and " << samples.copies.size() << " copies and memsets; wrote "
      << options.out << "\n";
  print_kernels(predictor, out);
  out << "copies:\n";
  print_copies(predictor, out);
  return 0;
}

}  // namespace gpuqos::predictor
