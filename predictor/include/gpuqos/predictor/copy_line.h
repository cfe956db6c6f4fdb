// One copy class's model: duration = latency + bytes * ns_per_byte, fitted on relative error with
// non-negative coefficients from running sums (refitted on every observation, O(1)), and a blend
// that corrects the line by the recent medians of the recorded sizes nearest to the query (within
// two doublings). Test-then-train scores choose between line and blend. The line is fitted only
// once sizes at least 2x apart were seen: from one size, latency and bandwidth cannot be told apart
// (a 256-B memset timed at 165 us made every 4-MiB one 1.35 s), and only that size is known.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "gpuqos/predictor/model_score.h"
#include "gpuqos/predictor/recent_window.h"
#include "gpuqos/predictor/size_memory.h"

namespace gpuqos::predictor {

class CopyLine {
 public:
  struct Sums {
    double g00 = 0, g01 = 0, g11 = 0;  // Gram of (1, bytes) / duration
    double r0 = 0, r1 = 0;             // its right side
    double weight = 0;                 // observations, decayed
  };
  enum Model { kLine = 0, kBlend = 1 };

  struct Answer {
    double ns = 0;
    bool blended = false;
  };

  explicit CopyLine(std::uint32_t window = 64) : residuals_(window) {}

  void observe(std::uint64_t bytes, double duration_ns, double decay, std::uint32_t score_window);
  bool fitted() const { return fitted_; }
  // The recent median time of copies of exactly `bytes`, if that size is remembered.
  std::optional<double> recorded_ns(std::uint64_t bytes) const;
  double line_ns(std::uint64_t bytes) const { return latency_ns_ + double(bytes) * ns_per_byte_; }
  Answer predict(std::uint64_t bytes) const;
  double upper_ratio() const { return upper_ratio_; }
  double latency_ns() const { return latency_ns_; }
  double ns_per_byte() const { return ns_per_byte_; }
  // Whether the fit found a bandwidth at all: one of more than 20 TB/s (or none) means every size it
  // saw was latency-bound, and says nothing of how a larger copy's time grows.
  static constexpr double kMinNsPerByte = 1.0 / 20'000;
  bool learned_bandwidth() const { return ns_per_byte_ >= kMinNsPerByte; }
  // How many sizes are remembered, and the largest (0: none).
  std::uint64_t largest_bytes() const { return sizes_.entries().empty() ? 0 : sizes_.entries().back().bytes; }
  std::size_t remembered_sizes() const { return sizes_.entries().size(); }

  // Persistence.
  struct State {
    Sums sums;
    std::vector<float> residuals;  // oldest first
    std::array<ModelScore, 2> scores;
    std::vector<std::pair<std::uint64_t, std::vector<float>>> sizes;  // bytes, log2 durations oldest first
    std::uint64_t size_clock = 0;
  };
  State state() const;
  void restore(const State& state);

 private:
  std::optional<double> blend_log2(std::uint64_t bytes) const;
  void refit();

  Sums sums_;
  RecentWindow residuals_;  // log2(measured / predicted) before each observation
  SizeMemory sizes_;
  std::array<ModelScore, 2> scores_{};
  bool fitted_ = false;
  double latency_ns_ = 0;
  double ns_per_byte_ = 0;
  double upper_ratio_ = 1.5;
};

}  // namespace gpuqos::predictor
