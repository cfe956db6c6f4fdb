// The kNN memory: equal shapes merge, replacement is bounded and FIFO, neighbours come in order.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gpuqos/predictor/sample_store.h"

namespace gpuqos::predictor {
namespace {

LaunchShape shape_mn(std::uint64_t m, std::uint64_t n) {
  LaunchShape s;
  s.arg_count = 2;
  s.args[0] = m;
  s.args[1] = n;
  return s;
}

TEST(SampleStore, EqualShapesMergeIntoOneSample) {
  SampleStore store(16, 108);
  store.record(shape_mn(4, 4), 10.0f);
  store.record(shape_mn(4, 4), 12.0f);
  ASSERT_EQ(store.size(), 1u);
  EXPECT_EQ(store.sample(0).count, 2u);
  EXPECT_FLOAT_EQ(store.sample(0).log2_ns, 11.0f);  // mean of the first few
}

TEST(SampleStore, LatticeNeighboursInDistanceOrder) {
  SampleStore store(64, 108);
  for (std::uint64_t i = 0; i < 4; ++i)
    for (std::uint64_t j = 0; j < 4; ++j) store.record(shape_mn((2u << (2 * i)) - 1, (2u << (2 * j)) - 1), float(10 * i + j));
  // log2(1 + m) = 1, 3, 5, 7: a lattice of spacing 2. Query at the point (3, 5) + (0.5, 0).
  const Point q = knn_point(shape_mn(10, 31));  // log2(11) ~ 3.46, log2(32) = 5
  const auto near = store.nearest(q, 4);
  ASSERT_EQ(near.count, 4);
  EXPECT_FLOAT_EQ(store.sample(near.slot[0]).log2_ns, 12.0f);  // (i=1, j=2)
  EXPECT_NEAR(near.distance[0], std::log2(11.0) - 3, 3e-3);
  EXPECT_FLOAT_EQ(store.sample(near.slot[1]).log2_ns, 22.0f);  // (i=2, j=2)
  for (int k = 1; k < 4; ++k) EXPECT_LE(near.distance[std::size_t(k - 1)], near.distance[std::size_t(k)]);
  const auto exact = store.nearest(knn_point(shape_mn(31, 7)), 1);
  EXPECT_EQ(exact.distance[0], 0.0f);
  EXPECT_FLOAT_EQ(store.sample(exact.slot[0]).log2_ns, 21.0f);
}

TEST(SampleStore, CoordinatesConstantInTheStoreStillCount) {
  SampleStore store(8, 108);
  LaunchShape a = shape_mn(8, 8);
  store.record(a, 1.0f);
  LaunchShape query = a;
  query.block = {1023, 1, 1};  // every stored sample has block 1: the query is 9 units away
  EXPECT_NEAR(store.nearest(knn_point(query), 1).distance[0], 9.0, 3e-3);
}

TEST(SampleStore, BoundedWithOldestReplacedFirst) {
  SampleStore store(32, 108);
  for (std::uint64_t i = 1; i <= 1000; ++i) store.record(shape_mn(i, 3), float(i));
  EXPECT_EQ(store.size(), 32u);
  float oldest = 1e9f;
  for (std::uint32_t slot = 0; slot < store.size(); ++slot) oldest = std::min(oldest, store.sample(slot).log2_ns);
  EXPECT_EQ(oldest, 969.0f);  // the last 32 distinct shapes
  store.record(shape_mn(1000, 3), 0.0f);  // still indexed after replacements: merges
  EXPECT_EQ(store.size(), 32u);
}

TEST(SampleStore, RestoreRebuildsTheIndex) {
  SampleStore store(8, 108);
  for (std::uint64_t i = 1; i <= 5; ++i) store.record(shape_mn(i, i), float(i));
  SampleStore copy(8, 108);
  copy.restore(store.samples(), store.next_replacement());
  ASSERT_EQ(copy.size(), 5u);
  const auto near = copy.nearest(knn_point(shape_mn(3, 3)), 1);
  EXPECT_EQ(near.distance[0], 0.0f);
  EXPECT_FLOAT_EQ(copy.sample(near.slot[0]).log2_ns, 3.0f);
}

// A sample's count is saved and restored, so it runs on across gpuqosd's restarts: at 2^32 it
// wrapped to 0, the mean divided by it, and the NaN made the next saved store unloadable.
TEST(SampleStore, ASamplesCountSaturatesRatherThanWrapping) {
  constexpr std::uint32_t kMax = std::numeric_limits<std::uint32_t>::max();
  SampleStore store(8, 108);
  store.restore({{shape_mn(4, 4), 10.0f, kMax}}, 0);
  ASSERT_EQ(store.sample(0).count, kMax);
  store.record(shape_mn(4, 4), 12.0f);
  EXPECT_EQ(store.sample(0).count, kMax);
  EXPECT_TRUE(std::isfinite(store.sample(0).log2_ns));
  EXPECT_NEAR(store.sample(0).log2_ns, 10.25f, 1e-5) << "weighted as the 8th and later are";
}

}  // namespace
}  // namespace gpuqos::predictor
