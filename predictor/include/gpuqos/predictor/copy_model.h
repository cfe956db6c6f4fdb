// Copies and memsets: one CopyLine per direction and host memory kind, and one per direction over
// every kind (the fallback for a kind not seen yet), then the configured default line.
#pragma once

#include <array>

#include "gpuqos/predictor/config.h"
#include "gpuqos/predictor/copy_line.h"
#include "gpuqos/predictor/features.h"
#include "gpuqos/predictor/prediction.h"

namespace gpuqos::predictor {

class CopyModel {
 public:
  static constexpr std::size_t kClassCount = kCopyDirectionCount * kHostMemoryCount;
  // Index of a class line: direction * kHostMemoryCount + host memory.
  static std::size_t class_index(CopyDirection direction, HostMemory memory) {
    return std::size_t(direction) * kHostMemoryCount + std::size_t(memory);
  }

  explicit CopyModel(const PredictorConfig& config);

  Prediction predict(const CopyFeatures& copy, const PredictorConfig& config) const;
  void observe(const CopyFeatures& copy, double duration_ns, const PredictorConfig& config);

  const CopyLine& line(CopyDirection direction, HostMemory memory) const { return by_class_[class_index(direction, memory)]; }
  const CopyLine& direction_line(CopyDirection direction) const { return by_direction_[std::size_t(direction)]; }

  // Persistence: class lines by class_index(), then direction lines.
  struct State {
    std::array<CopyLine::State, kClassCount> classes;
    std::array<CopyLine::State, kCopyDirectionCount> directions;
  };
  State state() const;
  void restore(const State& state);

 private:
  std::array<CopyLine, kClassCount> by_class_;
  std::array<CopyLine, kCopyDirectionCount> by_direction_;
};

}  // namespace gpuqos::predictor
