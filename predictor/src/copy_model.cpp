// CopyModel: a line per copy class, a line per direction, a configured default.
#include "gpuqos/predictor/copy_model.h"

#include <algorithm>

namespace gpuqos::predictor {

namespace {

bool valid(const CopyFeatures& c) {
  return std::size_t(c.direction) < kCopyDirectionCount && std::size_t(c.host_memory) < kHostMemoryCount;
}

double default_bytes_per_ns(const PredictorConfig& config, CopyDirection direction) {
  return std::max(config.default_copy_bytes_per_ns[std::size_t(direction)], 1e-9);
}

// A line that learned no bandwidth (every size it saw was latency-bound: a trace's 8-704 B copies
// fitted as infinitely fast) cannot say how long a larger copy takes: past its largest size, the
// bytes beyond it move at the configured default bandwidth.
double past_what_was_seen(const CopyLine& line, std::uint64_t bytes, double ns, const PredictorConfig& config,
                          CopyDirection direction) {
  const std::uint64_t largest = line.largest_bytes();
  if (line.learned_bandwidth() || bytes <= largest) return ns;
  return std::max(ns, line.line_ns(largest) + double(bytes - largest) / default_bytes_per_ns(config, direction));
}

}  // namespace

CopyModel::CopyModel(const PredictorConfig& config) {
  by_class_.fill(CopyLine(config.stats_window));
  by_direction_.fill(CopyLine(config.stats_window));
}

Prediction CopyModel::predict(const CopyFeatures& copy, const PredictorConfig& config) const {
  if (!valid(copy)) return {};
  const CopyLine& own = line(copy.direction, copy.host_memory);
  if (own.fitted()) {
    const CopyLine::Answer a = own.predict(copy.bytes);
    const double ns = past_what_was_seen(own, copy.bytes, a.ns, config, copy.direction);
    if (ns > 0) return {ns, ns * own.upper_ratio(), a.blended ? ModelUsed::copy_blend : ModelUsed::copy_linear, -1};
  }
  if (const auto seen = own.recorded_ns(copy.bytes)) return {*seen, *seen * own.upper_ratio(), ModelUsed::copy_linear, -1};
  const CopyLine& pooled = direction_line(copy.direction);
  if (pooled.fitted()) {
    const double ns = past_what_was_seen(pooled, copy.bytes, pooled.line_ns(copy.bytes), config, copy.direction);
    if (ns > 0) return {ns, ns * pooled.upper_ratio(), ModelUsed::copy_direction, -1};
  }
  const double ns = config.default_copy_latency_ns + double(copy.bytes) / default_bytes_per_ns(config, copy.direction);
  return {ns, ns * 2, ModelUsed::copy_default, -1};
}

void CopyModel::observe(const CopyFeatures& copy, double duration_ns, const PredictorConfig& config) {
  if (!valid(copy)) return;
  by_class_[class_index(copy.direction, copy.host_memory)].observe(copy.bytes, duration_ns, config.regression_decay,
                                                                    config.score_window);
  by_direction_[std::size_t(copy.direction)].observe(copy.bytes, duration_ns, config.regression_decay, config.score_window);
}

CopyModel::State CopyModel::state() const {
  State s;
  for (std::size_t i = 0; i < kClassCount; ++i) s.classes[i] = by_class_[i].state();
  for (std::size_t i = 0; i < kCopyDirectionCount; ++i) s.directions[i] = by_direction_[i].state();
  return s;
}

void CopyModel::restore(const State& state) {
  for (std::size_t i = 0; i < kClassCount; ++i) by_class_[i].restore(state.classes[i]);
  for (std::size_t i = 0; i < kCopyDirectionCount; ++i) by_direction_[i].restore(state.directions[i]);
}

}  // namespace gpuqos::predictor
