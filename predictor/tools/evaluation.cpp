// Error summaries, training order, train/test evaluation, cross-validation, work splits.
#include "gpuqos/predictor/evaluation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "gpuqos/predictor/shape_features.h"

namespace gpuqos::predictor {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<std::size_t> shuffled(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::uint64_t state = seed;
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[splitmix64(state) % i]);
  return order;
}

std::string copy_class(const CopyFeatures& c) {
  const bool has_host = c.direction == CopyDirection::h2d || c.direction == CopyDirection::d2h;
  return has_host ? std::string(to_string(c.direction)) + "/" + to_string(c.host_memory) : to_string(c.direction);
}

double ape(double predicted, double measured) { return std::fabs(predicted - measured) / measured; }

// Accumulates errors per group and the models that answered.
class ErrorCollector {
 public:
  void kernel(const std::string& name, const Prediction& p, double measured) {
    const double e = ape(p.duration_ns, measured);
    kernels_.push_back(e);
    per_kernel_[name].push_back(e);
    ++result_.answered_by[to_string(p.model)];
    if (p.candidate >= 0) ++result_.candidates[describe_candidate(p.candidate)];
  }
  void copy(const CopyFeatures& c, const Prediction& p, double measured) {
    const double e = ape(p.duration_ns, measured);
    copies_.push_back(e);
    per_copy_[copy_class(c)].push_back(e);
    ++result_.answered_by[to_string(p.model)];
  }
  EvalResult finish() {
    result_.kernels = summarize_errors(std::move(kernels_));
    result_.copies = summarize_errors(std::move(copies_));
    for (auto& [name, errors] : per_kernel_) result_.per_kernel[name] = summarize_errors(std::move(errors));
    for (auto& [name, errors] : per_copy_) result_.per_copy_class[name] = summarize_errors(std::move(errors));
    return std::move(result_);
  }

 private:
  std::vector<double> kernels_, copies_;
  std::map<std::string, std::vector<double>> per_kernel_, per_copy_;
  EvalResult result_;
};

void predict_all(const Predictor& predictor, const SampleSet& test, const EvalSettings& settings, ErrorCollector& out) {
  for (const KernelSample& k : test.kernels) out.kernel(k.name, predictor.predict(KernelFeatures{k.name, k.shape}), k.duration_ns);
  for (const CopySample& c : test.copies) {
    if (c.copy.bytes >= settings.min_copy_bytes) out.copy(c.copy, predictor.predict(c.copy), c.duration_ns);
  }
}

}  // namespace

ErrorSummary summarize_errors(std::vector<double> apes) {
  ErrorSummary s;
  s.count = apes.size();
  if (apes.empty()) return s;
  std::sort(apes.begin(), apes.end());
  auto nearest_rank = [&](double q) { return apes[std::max<std::size_t>(1, std::size_t(std::ceil(q * double(apes.size())))) - 1]; };
  s.median_ape = nearest_rank(0.5);
  s.p90_ape = nearest_rank(0.9);
  s.mape = std::accumulate(apes.begin(), apes.end(), 0.0) / double(apes.size());
  return s;
}

std::optional<std::string> keep_most_measured_names(SampleSet& samples, std::size_t max_kernels) {
  std::unordered_map<std::string, std::size_t> counts;
  for (const KernelSample& k : samples.kernels) ++counts[k.name];
  if (counts.size() <= max_kernels) return std::nullopt;
  std::vector<std::pair<std::string, std::size_t>> names(counts.begin(), counts.end());
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  std::unordered_set<std::string> kept;
  for (std::size_t i = 0; i < max_kernels; ++i) kept.insert(names[i].first);
  const std::size_t before = samples.kernels.size();
  std::erase_if(samples.kernels, [&](const KernelSample& k) { return !kept.contains(k.name); });
  return std::to_string(names.size()) + " kernel names, more than a store holds (" + std::to_string(max_kernels) +
         "): the " + std::to_string(names.size() - max_kernels) + " least measured (" +
         std::to_string(before - samples.kernels.size()) + " measurements, at most " +
         std::to_string(names[max_kernels].second) + " each) are left out and will be predicted by the default";
}

Predictor train_predictor(const SampleSet& samples, const PredictorConfig& config, std::uint64_t seed) {
  Predictor predictor(config);
  for (std::size_t i : shuffled(samples.kernels.size(), seed)) {
    const KernelSample& k = samples.kernels[i];
    predictor.observe(KernelFeatures{k.name, k.shape}, k.duration_ns);
  }
  for (std::size_t i : shuffled(samples.copies.size(), seed + 1)) predictor.observe(samples.copies[i].copy, samples.copies[i].duration_ns);
  return predictor;
}

EvalResult evaluate(const SampleSet& train, const SampleSet& test, const EvalSettings& settings) {
  ErrorCollector collector;
  predict_all(train_predictor(train, settings.config, settings.seed), test, settings, collector);
  return collector.finish();
}

EvalResult cross_validate(const SampleSet& samples, int folds, const EvalSettings& settings) {
  folds = std::max(folds, 2);
  std::vector<int> kernel_fold(samples.kernels.size()), copy_fold(samples.copies.size());
  const auto kernel_order = shuffled(samples.kernels.size(), settings.seed ^ 0x5eed);
  const auto copy_order = shuffled(samples.copies.size(), settings.seed ^ 0xc0de);
  for (std::size_t i = 0; i < kernel_order.size(); ++i) kernel_fold[kernel_order[i]] = int(i % std::size_t(folds));
  for (std::size_t i = 0; i < copy_order.size(); ++i) copy_fold[copy_order[i]] = int(i % std::size_t(folds));
  ErrorCollector collector;
  for (int f = 0; f < folds; ++f) {
    SampleSet train, test;
    for (std::size_t i = 0; i < samples.kernels.size(); ++i)
      (kernel_fold[i] == f ? test : train).kernels.push_back(samples.kernels[i]);
    for (std::size_t i = 0; i < samples.copies.size(); ++i) (copy_fold[i] == f ? test : train).copies.push_back(samples.copies[i]);
    predict_all(train_predictor(train, settings.config, settings.seed + std::uint64_t(f)), test, settings, collector);
  }
  return collector.finish();
}

double work_of(const KernelSample& kernel) {
  const LaunchShape& s = kernel.shape;
  double work = 1;
  bool any = false;
  for (std::size_t i = 0; i < s.arg_count; ++i) {
    if (!numeric_arg(s, i)) continue;
    work *= std::max(1.0, double(s.args[i]));
    any = true;
  }
  if (any) return work;
  return double(s.grid[0]) * s.grid[1] * s.grid[2] * double(s.block[0]) * s.block[1] * s.block[2];
}

std::pair<SampleSet, SampleSet> split_by_work(const SampleSet& samples, double train_fraction) {
  train_fraction = std::clamp(train_fraction, 0.0, 1.0);
  auto split = [train_fraction](const auto& items, auto work, auto& train, auto& test) {
    std::vector<std::size_t> order(items.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return work(items[a]) < work(items[b]); });
    const auto cut = std::size_t(std::llround(train_fraction * double(items.size())));
    for (std::size_t i = 0; i < order.size(); ++i) (i < cut ? train : test).push_back(items[order[i]]);
  };
  std::pair<SampleSet, SampleSet> out;
  split(samples.kernels, [](const KernelSample& k) { return work_of(k); }, out.first.kernels, out.second.kernels);
  split(samples.copies, [](const CopySample& c) { return double(c.copy.bytes); }, out.first.copies, out.second.copies);
  return out;
}

}  // namespace gpuqos::predictor
