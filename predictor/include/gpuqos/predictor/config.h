// The predictor's parameters: device facts, memory bounds, learning rates, defaults.
#pragma once

#include <array>
#include <cstdint>

#include "gpuqos/predictor/features.h"

namespace gpuqos::predictor {

struct PredictorConfig {
  std::uint32_t sm_count = 108;               // SMs of the device: waves = ceil(blocks / sm_count) (A100: 108)
  std::uint32_t max_samples_per_kernel = 256; // distinct shapes remembered per kernel name (kNN memory)
  std::uint32_t max_kernels = 4096;           // names learned; later ones get the global default
  std::uint32_t stats_window = 64;            // recent durations per name, for its median and p90
  std::uint32_t score_window = 256;           // each candidate model's error is averaged over ~this many
  std::uint32_t min_scored = 5;               // observations a candidate is scored on before it may answer
  std::uint32_t refit_every = 8;              // regressions refit every Nth observation (every one below 64)
  double knn_max_distance = 1.0;              // log2 units: a query farther from every sample is not kNN's
  double regression_decay = 1.0 - 1.0 / 65536;// per observation: old observations fade (drift)
  double default_kernel_ns = 10'000;          // before any kernel was measured
  double default_copy_latency_ns = 5'000;     // before any copy of a direction was measured
  std::array<double, kCopyDirectionCount> default_copy_bytes_per_ns{12.0, 12.0, 600.0, 800.0};  // h2d d2h d2d memset
};

}  // namespace gpuqos::predictor
