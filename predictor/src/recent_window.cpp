// RecentWindow: a ring buffer with nearest-rank quantiles.
#include "gpuqos/predictor/recent_window.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace gpuqos::predictor {

RecentWindow::RecentWindow(std::uint32_t capacity) : capacity_(std::max<std::uint32_t>(capacity, 1)) {
  values_.reserve(capacity_);
}

void RecentWindow::push(float value) {
  if (values_.size() < capacity_) {
    values_.push_back(value);
    return;
  }
  values_[next_] = value;
  next_ = (next_ + 1) % capacity_;
}

float RecentWindow::quantile(double q, float fallback) const {
  if (values_.empty()) return fallback;
  const std::size_t n = values_.size();
  std::array<float, 256> on_stack;  // the usual windows fit: no allocation on the observe path
  std::vector<float> on_heap;
  float* sorted = on_stack.data();
  if (n > on_stack.size()) {
    on_heap.resize(n);
    sorted = on_heap.data();
  }
  std::copy(values_.begin(), values_.end(), sorted);
  auto rank = static_cast<std::size_t>(std::ceil(std::clamp(q, 0.0, 1.0) * double(n)));
  rank = std::clamp<std::size_t>(rank, 1, n) - 1;
  std::nth_element(sorted, sorted + rank, sorted + n);
  return sorted[rank];
}

std::vector<float> RecentWindow::in_order() const {
  std::vector<float> out;
  out.reserve(values_.size());
  for (std::size_t i = 0; i < values_.size(); ++i) out.push_back(values_[(next_ + i) % values_.size()]);
  return out;
}

void RecentWindow::restore(const std::vector<float>& oldest_first) {
  values_.clear();
  next_ = 0;
  const std::size_t skip = oldest_first.size() > capacity_ ? oldest_first.size() - capacity_ : 0;
  for (std::size_t i = skip; i < oldest_first.size(); ++i) push(oldest_first[i]);
}

}  // namespace gpuqos::predictor
