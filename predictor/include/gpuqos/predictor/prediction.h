// A predicted duration, an upper estimate, and which model answered.
#pragma once

#include <cstdint>
#include <string>

namespace gpuqos::predictor {

// The fallback order for kernels is knn / regression / blend (per kernel, the one with the lowest
// validation error), then name_stats (median of the name's recent durations), then global_default;
// for copies copy_linear (the direction and host memory kind's latency + bandwidth line) or
// copy_blend (that line corrected at the recorded sizes nearest to the query), then
// copy_direction (the direction's line over all host memory kinds), then copy_default (the
// configured line).
enum class ModelUsed : std::uint8_t {
  none,  // an op that takes no engine time (sync, query marks)
  knn,
  regression,
  blend,  // regression corrected by its residuals at the nearest samples
  name_stats,
  global_default,
  copy_linear,
  copy_blend,
  copy_direction,
  copy_default,
};

struct Prediction {
  double duration_ns = 0;
  double upper_ns = 0;          // ~p90: duration times the p90 of recent measured/predicted ratios
  ModelUsed model = ModelUsed::none;
  std::int8_t candidate = -1;   // kernels: index into the candidate table (describe_candidate)
};

const char* to_string(ModelUsed model);

// "knn(k=4,idw)", "regression(wave_work)", ...; "" for -1.
std::string describe_candidate(int candidate);

}  // namespace gpuqos::predictor
