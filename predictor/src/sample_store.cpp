// SampleStore: distinct shapes, FIFO replacement, brute-force kNN on the varying coordinates.
#include "gpuqos/predictor/sample_store.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "code_scan.h"

namespace gpuqos::predictor {

namespace {

// Slots rounded up to whole groups of 4 (the scan's unit).
std::size_t padded(std::uint32_t capacity) { return (std::size_t(capacity) + 3) / 4 * 4; }

}  // namespace

SampleStore::SampleStore(std::uint32_t capacity, std::uint32_t sm_count)
    : capacity_(std::max<std::uint32_t>(capacity, 1)), sm_count_(sm_count) {}

std::uint32_t SampleStore::record(const LaunchShape& shape, float log2_ns) {
  const std::uint64_t hash = shape_hash(shape);
  if (auto it = slot_of_shape_.find(hash); it != slot_of_shape_.end() && samples_[it->second].shape == shape) {
    Sample& s = samples_[it->second];
    // Saturates: a shape launched 2^32 times (10 days at 5,000 a second) wrapped to 0 and divided
    // by it, and the NaN made the next saved store one that no load accepts.
    if (s.count < std::numeric_limits<std::uint32_t>::max()) s.count += 1;
    s.log2_ns += (log2_ns - s.log2_ns) / float(std::min<std::uint32_t>(s.count, 8));
    return it->second;
  }
  std::uint32_t slot;
  if (samples_.size() < capacity_) {
    slot = std::uint32_t(samples_.size());
    samples_.emplace_back();
    points_.emplace_back();
    banks_.emplace_back();
    log_banks_.emplace_back();
  } else {
    slot = next_replacement_;
    next_replacement_ = (next_replacement_ + 1) % capacity_;
    if (auto old = slot_of_shape_.find(shape_hash(samples_[slot].shape)); old != slot_of_shape_.end() && old->second == slot)
      slot_of_shape_.erase(old);
  }
  slot_of_shape_[hash] = slot;
  put(slot, shape, log2_ns);
  return slot;
}

void SampleStore::put(std::uint32_t slot, const LaunchShape& shape, float log2_ns) {
  samples_[slot] = {shape, log2_ns, 1};
  points_[slot] = knn_point(shape);
  banks_[slot] = linear_bank(shape, sm_count_);
  log_banks_[slot] = predictor::log_bank(shape);
  if (samples_.size() == 1) reference_ = points_[slot];
  const int before = varying_count_;
  note_coordinates(points_[slot]);
  if (varying_count_ != before) {
    repack_all();
  } else {
    pack(slot);
  }
}

void SampleStore::note_coordinates(const Point& point) {
  for (std::size_t d = 0; d < kPointDims; ++d) {
    if (is_varying_[d] || point[d] == reference_[d]) continue;
    is_varying_[d] = true;
    varying_[std::size_t(varying_count_++)] = std::uint8_t(d);
  }
}

void SampleStore::pack(std::uint32_t slot) {
  for (int j = 0; j < varying_count_; ++j)
    codes_[std::size_t(slot) * stride_ + std::size_t(j)] = detail::encode(points_[slot][varying_[std::size_t(j)]]);
}

void SampleStore::repack_all() {
  stride_ = varying_count_ <= 8 ? 8 : 16;
  codes_.assign(padded(capacity_) * stride_, 0);
  for (std::uint32_t slot = 0; slot < samples_.size(); ++slot) pack(slot);
}

std::optional<std::uint32_t> SampleStore::find(const LaunchShape& shape) const {
  const auto it = slot_of_shape_.find(shape_hash(shape));
  if (it == slot_of_shape_.end() || !(samples_[it->second].shape == shape)) return std::nullopt;
  return it->second;
}

SampleStore::Neighbors SampleStore::nearest(const Point& query, int k) const {
  Neighbors out;
  k = std::clamp(k, 1, kMaxNeighbors);
  if (samples_.empty()) return out;
  float offset = 0;  // the query's distance along the coordinates every sample shares
  for (std::size_t d = 0; d < kPointDims; ++d) {
    const float delta = query[d] - reference_[d];
    if (!is_varying_[d]) offset += delta * delta;
  }
  std::array<std::int16_t, kPointDims> coded_query{};
  for (int j = 0; j < varying_count_; ++j) coded_query[std::size_t(j)] = detail::encode(query[varying_[std::size_t(j)]]);
  detail::TopK top(k);
  if (varying_count_ == 0) {  // every sample sits at the reference point
    for (std::uint32_t s = 0; s < std::uint32_t(std::min<std::size_t>(samples_.size(), std::size_t(k))); ++s) top.offer(0, s);
  } else {
    detail::scan_codes(codes_.data(), stride_, samples_.size(), coded_query.data(), top);
  }
  for (int j = 0; j < k && top.d2[std::size_t(j)] != INT32_MAX; ++j) {
    out.slot[std::size_t(j)] = top.slot[std::size_t(j)];
    out.distance[std::size_t(j)] = std::sqrt(float(top.d2[std::size_t(j)]) / (detail::kCodeScale * detail::kCodeScale) + offset);
    out.count = j + 1;
  }
  return out;
}

void SampleStore::restore(const std::vector<Sample>& samples, std::uint32_t next_replacement) {
  *this = SampleStore(capacity_, sm_count_);
  for (const Sample& s : samples) {
    if (samples_.size() >= capacity_) break;
    const std::size_t before = samples_.size();
    record(s.shape, s.log2_ns);
    if (samples_.size() > before) samples_.back().count = std::max<std::uint32_t>(s.count, 1);
  }
  next_replacement_ = samples_.size() == capacity_ ? next_replacement % capacity_ : 0;
}

}  // namespace gpuqos::predictor
