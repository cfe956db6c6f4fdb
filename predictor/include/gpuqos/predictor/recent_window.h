// The last N values of a series, with quantiles over them: bounded robust statistics per key.
#pragma once

#include <cstdint>
#include <vector>

namespace gpuqos::predictor {

class RecentWindow {
 public:
  explicit RecentWindow(std::uint32_t capacity = 64);

  void push(float value);
  // Nearest-rank quantile (q in [0, 1]) of the values held; `fallback` when empty. O(size).
  float quantile(double q, float fallback = 0.0f) const;
  std::size_t size() const { return values_.size(); }
  std::uint32_t capacity() const { return capacity_; }

  // Oldest first; restore() takes the same order (keeping the newest `capacity` of them).
  std::vector<float> in_order() const;
  void restore(const std::vector<float>& oldest_first);

 private:
  std::uint32_t capacity_;
  std::uint32_t next_ = 0;  // slot the next push overwrites once full
  std::vector<float> values_;
};

}  // namespace gpuqos::predictor
