// One kernel's memory of distinct launch shapes and their recent durations, bounded in size, with
// k-nearest-neighbour search in the shapes' log2 coordinates (shape_features.h).
//
// Cost contract: record() is O(1) amortised (a hash lookup; a rebuild of the packed coordinates
// only when one that was constant so far starts to vary, at most kPointDims times). nearest()
// reads only the coordinates that vary among the samples, 16 or 32 bytes per sample, and never
// allocates.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "gpuqos/predictor/shape_features.h"

namespace gpuqos::predictor {

class SampleStore {
 public:
  static constexpr int kMaxNeighbors = 8;

  struct Sample {
    LaunchShape shape;
    float log2_ns = 0;         // recency-weighted mean of log2(duration) for this shape
    std::uint32_t count = 0;   // measurements averaged in
  };

  struct Neighbors {
    int count = 0;                                  // min(k, size())
    std::array<std::uint32_t, kMaxNeighbors> slot{};
    std::array<float, kMaxNeighbors> distance{};    // Euclidean, log2 units, ascending
  };

  SampleStore(std::uint32_t capacity, std::uint32_t sm_count);

  // Averages one measurement into the sample of an equal shape (the last 8 or so weigh most), or
  // adds a sample, replacing the oldest added one when full. Returns the sample's slot.
  std::uint32_t record(const LaunchShape& shape, float log2_ns);

  // The slot of the sample of exactly this shape, if there is one. O(1).
  std::optional<std::uint32_t> find(const LaunchShape& shape) const;

  // The k (<= kMaxNeighbors) samples nearest to `query` (a knn_point), nearest first.
  Neighbors nearest(const Point& query, int k) const;

  std::size_t size() const { return samples_.size(); }
  std::uint32_t capacity() const { return capacity_; }
  const Sample& sample(std::uint32_t slot) const { return samples_[slot]; }
  const Bank& bank(std::uint32_t slot) const { return banks_[slot]; }
  const LogBank& log_bank(std::uint32_t slot) const { return log_banks_[slot]; }

  // Persistence: the samples in slot order and the slot replaced next once full.
  const std::vector<Sample>& samples() const { return samples_; }
  std::uint32_t next_replacement() const { return next_replacement_; }
  void restore(const std::vector<Sample>& samples, std::uint32_t next_replacement);

 private:
  void put(std::uint32_t slot, const LaunchShape& shape, float log2_ns);
  void note_coordinates(const Point& point);
  void pack(std::uint32_t slot);
  void repack_all();

  std::uint32_t capacity_;
  std::uint32_t sm_count_;
  std::uint32_t next_replacement_ = 0;
  std::vector<Sample> samples_;
  std::vector<Point> points_;
  std::vector<Bank> banks_;
  std::vector<LogBank> log_banks_;
  std::unordered_map<std::uint64_t, std::uint32_t> slot_of_shape_;  // shape_hash -> slot
  // Coordinates that vary among the samples, as 16-bit fixed point (code_scan.h):
  // codes_[slot * stride_ + j] is coordinate varying_[j] of the sample in `slot`.
  Point reference_{};                      // the first sample's point: constant coordinates
  std::array<bool, kPointDims> is_varying_{};
  std::array<std::uint8_t, kPointDims> varying_{};
  int varying_count_ = 0;
  std::size_t stride_ = 8;  // 8 or 16 codes per sample
  std::vector<std::int16_t> codes_;
};

}  // namespace gpuqos::predictor
