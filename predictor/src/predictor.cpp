// Predictor: dispatch by op class and kernel name; the global default.
#include "gpuqos/predictor/predictor.h"

#include <algorithm>
#include <cmath>

namespace gpuqos::predictor {

Predictor::Predictor(PredictorConfig config) : config_(config), copies_(config_) {}

bool Predictor::adopt_sm_count(std::uint32_t sm_count) {
  if (sm_count == 0 || !kernels_.empty()) return false;
  config_.sm_count = sm_count;
  return true;
}

Prediction Predictor::predict(const OpFeatures& op) const {
  switch (op.op_class) {
    case OpClass::kernel: return predict(op.kernel);
    case OpClass::copy: return predict(op.copy);
    case OpClass::unsupported: break;
  }
  return {};
}

Prediction Predictor::predict(const KernelFeatures& kernel) const {
  if (const auto it = kernels_.find(kernel.name); it != kernels_.end()) return it->second.model.predict(kernel.shape, config_);
  if (global_log2_ns_.count == 0) return {config_.default_kernel_ns, config_.default_kernel_ns * 2, ModelUsed::global_default, -1};
  return {std::exp2(global_log2_ns_.mean), std::exp2(global_log2_ns_.upper()), ModelUsed::global_default, -1};
}

Prediction Predictor::predict(const CopyFeatures& copy) const { return copies_.predict(copy, config_); }

bool Predictor::observe(const OpFeatures& op, double duration_ns) {
  switch (op.op_class) {
    case OpClass::kernel: return observe(op.kernel, duration_ns);
    case OpClass::copy: return observe(op.copy, duration_ns);
    case OpClass::unsupported: break;
  }
  return false;
}

bool Predictor::observe(const KernelFeatures& kernel, double duration_ns) {
  // No name: nothing could look it up, and a store does not hold one.
  if (!(duration_ns > 0) || !std::isfinite(duration_ns) || kernel.name.empty()) return false;
  auto it = kernels_.find(kernel.name);
  if (it == kernels_.end()) {
    if (!make_room()) return false;
    it = kernels_.emplace(std::string(kernel.name), Kernel{KernelModel(config_)}).first;
  }
  it->second.model.observe(kernel.shape, duration_ns, config_);
  it->second.last_epoch = epoch_;
  global_log2_ns_.add(std::log2(duration_ns), config_.score_window);
  return true;
}

bool Predictor::make_room() {
  if (kernels_.size() < config_.max_kernels) return true;
  // A name's last epoch only rises: none can be idle before the oldest found last time is. So a
  // stream of new names while the table is full costs one scan per epoch, not one per name.
  if (kernels_.empty() || epoch_ < no_idle_name_before_) return false;
  const auto oldest = std::min_element(kernels_.begin(), kernels_.end(), [](const auto& a, const auto& b) {
    return a.second.last_epoch < b.second.last_epoch;
  });
  if (epoch_ - oldest->second.last_epoch < kIdleEpochs) {
    no_idle_name_before_ = oldest->second.last_epoch + kIdleEpochs;
    return false;
  }
  kernels_.erase(oldest);
  return true;
}

bool Predictor::observe(const CopyFeatures& copy, double duration_ns) {
  if (!(duration_ns > 0) || !std::isfinite(duration_ns)) return false;
  if (std::size_t(copy.direction) >= kCopyDirectionCount || std::size_t(copy.host_memory) >= kHostMemoryCount) return false;
  copies_.observe(copy, duration_ns, config_);
  return true;
}

std::size_t Predictor::stored_samples() const {
  std::size_t total = 0;
  for (const auto& [name, kernel] : kernels_) total += kernel.model.store().size();
  return total;
}

const KernelModel* Predictor::kernel(std::string_view name) const {
  const auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second.model;
}

std::optional<std::uint64_t> Predictor::last_observed_epoch(std::string_view name) const {
  const auto it = kernels_.find(name);
  if (it == kernels_.end()) return std::nullopt;
  return it->second.last_epoch;
}

std::vector<std::string> Predictor::kernel_names() const {
  std::vector<std::string> names;
  names.reserve(kernels_.size());
  for (const auto& [name, kernel] : kernels_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

Predictor::State Predictor::state() const {
  State s{config_, {}, copies_.state(), global_log2_ns_};
  for (const std::string& name : kernel_names()) s.kernels.emplace_back(name, kernels_.find(name)->second.model.state());
  return s;
}

Predictor Predictor::restore(const State& state) {
  Predictor p(state.config);
  for (const auto& [name, kernel_state] : state.kernels) {
    if (p.kernels_.size() >= p.config_.max_kernels) break;
    KernelModel model(p.config_);
    model.restore(kernel_state, p.config_);
    p.kernels_.insert_or_assign(name, Kernel{std::move(model)});
  }
  p.copies_.restore(state.copies);
  p.global_log2_ns_ = state.global_log2_ns;
  return p;
}

}  // namespace gpuqos::predictor
