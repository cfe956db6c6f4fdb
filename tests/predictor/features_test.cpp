// Features from descriptors and the numbers derived from a launch shape.
#include <gtest/gtest.h>

#include <cmath>

#include "gpuqos/predictor/features.h"
#include "gpuqos/predictor/shape_features.h"

namespace gpuqos::predictor {
namespace {

ipc::OpDescriptor kernel_descriptor() {
  ipc::OpDescriptor op{};
  op.kind = ipc::OpKind::kernel;
  op.grid[0] = 300, op.grid[1] = 2, op.grid[2] = 1;
  op.block[0] = 256, op.block[1] = 1, op.block[2] = 1;
  op.shared_bytes = 4096;
  op.arg_count = 3;
  op.args[0] = 512, op.args[1] = 1024, op.args[2] = 0x7f0000001000;  // the last looks like a pointer
  return op;
}

TEST(Features, KernelDescriptorKeepsShapeAndName) {
  const OpFeatures f = features_of(kernel_descriptor(), "gemm");
  ASSERT_EQ(f.op_class, OpClass::kernel);
  EXPECT_EQ(f.kernel.name, "gemm");
  EXPECT_EQ(f.kernel.shape.grid, (std::array<std::uint32_t, 3>{300, 2, 1}));
  EXPECT_EQ(f.kernel.shape.block[0], 256u);
  EXPECT_EQ(f.kernel.shape.shared_bytes, 4096u);
  EXPECT_EQ(f.kernel.shape.arg_count, 3);
  EXPECT_EQ(f.kernel.shape.args[1], 1024u);
}

TEST(Features, ArgCountIsClampedAndZeroDimsBecomeOne) {
  ipc::OpDescriptor op = kernel_descriptor();
  op.arg_count = 200;
  op.grid[2] = 0;
  const OpFeatures f = features_of(op, "k");
  EXPECT_EQ(f.kernel.shape.arg_count, kMaxArgs);
  EXPECT_EQ(f.kernel.shape.grid[2], 1u);
}

TEST(Features, CopiesMemsetsGraphsAndMarks) {
  ipc::OpDescriptor op{};
  op.kind = ipc::OpKind::copy;
  op.direction = ipc::CopyDirection::h2d;
  op.host_memory = ipc::HostMemory::pageable;
  op.bytes = 1 << 20;
  OpFeatures f = features_of(op, "ignored");
  ASSERT_EQ(f.op_class, OpClass::copy);
  EXPECT_EQ(f.copy.direction, CopyDirection::h2d);
  EXPECT_EQ(f.copy.host_memory, HostMemory::pageable);
  EXPECT_EQ(f.copy.bytes, 1u << 20);

  op.direction = ipc::CopyDirection::d2d;  // device-side: no host memory kind
  EXPECT_EQ(features_of(op, "").copy.host_memory, HostMemory::none);

  op.kind = ipc::OpKind::memset;
  EXPECT_EQ(features_of(op, "").copy.direction, CopyDirection::memset);

  op.kind = ipc::OpKind::graph;
  f = features_of(op, "graph:7");
  EXPECT_EQ(f.op_class, OpClass::kernel);
  EXPECT_EQ(f.kernel.name, "graph:7");

  op.kind = ipc::OpKind::sync;
  EXPECT_EQ(features_of(op, "").op_class, OpClass::unsupported);
  op.kind = ipc::OpKind::copy;
  op.direction = ipc::CopyDirection::none;  // not a valid copy
  EXPECT_EQ(features_of(op, "").op_class, OpClass::unsupported);
}

TEST(ShapeFeatures, BankHoldsWavesWorkAndSurface) {
  const LaunchShape s = features_of(kernel_descriptor(), "k").kernel.shape;
  const Bank b = linear_bank(s, 108);
  EXPECT_EQ(b[kBlocks], 600);
  EXPECT_EQ(b[kWaves], 6);  // ceil(600 / 108)
  EXPECT_EQ(b[kThreads], 600 * 256);
  EXPECT_EQ(b[kWork], 512.0 * 1024.0);  // the pointer-like arg is not a size
  EXPECT_EQ(b[kSurface], 1024.0 + 512.0);
  EXPECT_DOUBLE_EQ(b[kWaveWork], 6 * 512.0 * 1024.0 / 600);
  EXPECT_EQ(b[kWaveArg0 + 1], 6 * 1024.0);
  EXPECT_EQ(b[kWaveArg0 + 2], 0);
  EXPECT_EQ(linear_bank(s, 600)[kWaves], 1);  // the SM count is a parameter
}

TEST(ShapeFeatures, KernelWithoutArgsUsesThreadsAsWork) {
  LaunchShape s;
  s.grid = {10, 1, 1};
  s.block = {128, 1, 1};
  EXPECT_EQ(linear_bank(s, 108)[kWork], 1280);
  EXPECT_EQ(linear_bank(s, 108)[kSurface], 0);
}

TEST(ShapeFeatures, KnnPointIsLog2AndIgnoresPointers) {
  const LaunchShape s = features_of(kernel_descriptor(), "k").kernel.shape;
  const Point p = knn_point(s);
  EXPECT_NEAR(p[0], std::log2(301.0f), 2e-3);  // a fast log2: a faithful scale, not exact
  EXPECT_NEAR(p[3], std::log2(257.0f), 2e-3);
  EXPECT_NEAR(p[6], std::log2(4097.0f), 2e-3);
  EXPECT_NEAR(p[8], std::log2(1025.0f), 2e-3);
  EXPECT_EQ(p[9], 0.0f);
  EXPECT_EQ(p[15], 0.0f);
}

TEST(ShapeFeatures, HashSeparatesShapes) {
  LaunchShape a;
  LaunchShape b = a;
  EXPECT_EQ(shape_hash(a), shape_hash(b));
  b.args[0] = 5;
  b.arg_count = 1;
  EXPECT_NE(shape_hash(a), shape_hash(b));
  b = a;
  b.grid = {1, 2, 1};
  EXPECT_NE(shape_hash(a), shape_hash(b));
}

}  // namespace
}  // namespace gpuqos::predictor
