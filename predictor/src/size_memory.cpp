// SizeMemory: a sorted, bounded table of copy sizes and their recent durations.
#include "gpuqos/predictor/size_memory.h"

#include <algorithm>

namespace gpuqos::predictor {

namespace {

auto lower(std::vector<SizeMemory::Entry>& entries, std::uint64_t bytes) {
  return std::lower_bound(entries.begin(), entries.end(), bytes,
                          [](const SizeMemory::Entry& e, std::uint64_t b) { return e.bytes < b; });
}

}  // namespace

void SizeMemory::record(std::uint64_t bytes, float log2_ns) {
  ++clock_;
  auto it = lower(entries_, bytes);
  if (it == entries_.end() || it->bytes != bytes) {
    if (entries_.size() >= std::max<std::uint32_t>(capacity_, 1)) {
      const auto stalest = std::min_element(entries_.begin(), entries_.end(),
                                            [](const Entry& a, const Entry& b) { return a.last_seen < b.last_seen; });
      entries_.erase(stalest);
      it = lower(entries_, bytes);
    }
    it = entries_.insert(it, Entry{bytes, RecentWindow(window_), 0, 0});
  }
  it->log2_ns.push(log2_ns);
  it->median_log2_ns = it->log2_ns.quantile(0.5);
  it->last_seen = clock_;
}

const SizeMemory::Entry* SizeMemory::at_or_below(std::uint64_t bytes) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), bytes,
                             [](std::uint64_t b, const Entry& e) { return b < e.bytes; });
  return it == entries_.begin() ? nullptr : &*std::prev(it);
}

const SizeMemory::Entry* SizeMemory::above(std::uint64_t bytes) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), bytes,
                             [](std::uint64_t b, const Entry& e) { return b < e.bytes; });
  return it == entries_.end() ? nullptr : &*it;
}

void SizeMemory::restore(std::vector<Entry> entries, std::uint64_t clock) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.bytes < b.bytes; });
  entries.erase(std::unique(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.bytes == b.bytes; }),
                entries.end());
  if (entries.size() > capacity_) entries.resize(capacity_);
  for (Entry& e : entries) e.median_log2_ns = e.log2_ns.quantile(0.5);
  entries_ = std::move(entries);
  clock_ = clock;
}

}  // namespace gpuqos::predictor
