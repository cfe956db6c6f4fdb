// Tests of validate_op / validate_completion: valid descriptors pass, each bad field is named.
#include "gpuqos/ipc/validate.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace gpuqos::ipc {
namespace {

constexpr std::uint32_t kDevices = 2;

OpDescriptor kernel_op() {
  OpDescriptor op{};
  op.seq = 10;
  op.kind = OpKind::kernel;
  op.device = 1;
  op.stream = 0x7f00deadbeef;
  op.posted_ns = 1'000'000;
  op.kernel_id = 3;
  op.grid[0] = 1024; op.grid[1] = 2; op.grid[2] = 1;
  op.block[0] = 256; op.block[1] = 1; op.block[2] = 1;
  op.shared_bytes = 48 * 1024;
  op.param_bytes = 64;
  op.arg_count = 2;
  op.args[0] = 42;
  return op;
}

OpDescriptor copy_op(CopyDirection direction, HostMemory host) {
  OpDescriptor op{};
  op.seq = 10;
  op.kind = OpKind::copy;
  op.posted_ns = 1'000'000;
  op.bytes = 1 << 20;
  op.direction = direction;
  op.host_memory = host;
  return op;
}

OpDescriptor plain_op(OpKind kind) {
  OpDescriptor op{};
  op.seq = 10;
  op.kind = kind;
  op.posted_ns = 1'000'000;
  if (kind == OpKind::memset) {
    op.direction = CopyDirection::memset;
    op.bytes = 4096;
  }
  return op;
}

void expect_valid(const OpDescriptor& op) {
  Status status = validate_op(op, 9, kDevices);
  EXPECT_TRUE(status) << status.error();
}

void expect_invalid(const OpDescriptor& op, const std::string& why) {
  Status status = validate_op(op, 9, kDevices);
  ASSERT_FALSE(status) << "accepted, expected: " << why;
  EXPECT_NE(status.error().find(why), std::string::npos) << status.error();
}

OpDescriptor with(OpDescriptor op, const std::function<void(OpDescriptor&)>& change) {
  change(op);
  return op;
}

TEST(ValidateOp, AcceptsWellFormedOpsOfEveryKind) {
  expect_valid(kernel_op());
  expect_valid(copy_op(CopyDirection::h2d, HostMemory::pinned));
  expect_valid(copy_op(CopyDirection::d2h, HostMemory::pageable));
  expect_valid(copy_op(CopyDirection::d2d, HostMemory::none));
  expect_valid(plain_op(OpKind::memset));
  expect_valid(plain_op(OpKind::graph));
  expect_valid(with(plain_op(OpKind::graph), [](OpDescriptor& op) { op.kernel_id = 5; }));
  expect_valid(plain_op(OpKind::sync));
  expect_valid(plain_op(OpKind::query_begin));
  expect_valid(plain_op(OpKind::query_end));
  expect_valid(plain_op(OpKind::query_arrived));
}

TEST(ValidateOp, IgnoresReservedBytes) {
  OpDescriptor op = kernel_op();
  std::memset(op.reserved, 0xab, sizeof op.reserved);
  expect_valid(op);
}

TEST(ValidateOp, RejectsCommonFields) {
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.kind = static_cast<OpKind>(kOpKindCount); }), "kind 8");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.kind = static_cast<OpKind>(255); }), "kind 255");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.seq = 9; }), "seq 9 not after the previous 9");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.seq = 3; }), "seq 3");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.device = kDevices; }), "device 2");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.posted_ns = 0; }), "posted_ns");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.posted_ns = -5; }), "posted_ns");
}

TEST(ValidateOp, FirstOpNeedsSeqAboveZero) {
  OpDescriptor op = kernel_op();
  op.seq = 0;
  EXPECT_FALSE(validate_op(op, 0, kDevices));
  op.seq = 1;
  EXPECT_TRUE(validate_op(op, 0, kDevices));
}

TEST(ValidateOp, RejectsBadKernelFields) {
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.kernel_id = 0; }), "kernel id");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.grid[0] = 0; }), "grid[0] = 0");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.grid[1] = 65536; }), "grid[1] = 65536");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.grid[2] = 0; }), "grid[2] = 0");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.grid[0] = 0x80000000u; }), "grid[0]");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.block[0] = 0; }), "block[0] = 0");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.block[0] = 1025; }), "block[0] = 1025");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.block[2] = 65; }), "block[2] = 65");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.block[0] = 64; op.block[1] = 32; }), "2048 threads");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.shared_bytes = 1 << 20; }), "shared_bytes");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.param_bytes = 40'000; }), "param_bytes");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.arg_count = 9; }), "arg_count 9");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.sm_count = 5000; }), "sm_count 5000");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.bytes = 1; }), "copy fields");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.direction = CopyDirection::h2d; }), "copy fields");
  expect_invalid(with(kernel_op(), [](OpDescriptor& op) { op.host_memory = HostMemory::pinned; }), "copy fields");
}

TEST(ValidateOp, RejectsInconsistentCopies) {
  expect_invalid(copy_op(CopyDirection::h2d, HostMemory::none), "pinned or pageable");
  expect_invalid(copy_op(CopyDirection::d2h, static_cast<HostMemory>(9)), "pinned or pageable");
  expect_invalid(copy_op(CopyDirection::d2d, HostMemory::pinned), "device-to-device");
  expect_invalid(copy_op(CopyDirection::none, HostMemory::none), "direction 0");
  expect_invalid(copy_op(CopyDirection::memset, HostMemory::none), "direction 4");
  expect_invalid(copy_op(static_cast<CopyDirection>(200), HostMemory::none), "direction 200");
  expect_invalid(with(copy_op(CopyDirection::d2d, HostMemory::none), [](OpDescriptor& op) { op.bytes = ~0ull; }),
                 "bytes");
}

TEST(ValidateOp, RejectsLaunchFieldsOutsideKernels) {
  for (OpKind kind : {OpKind::copy, OpKind::memset, OpKind::graph, OpKind::sync, OpKind::query_begin}) {
    OpDescriptor op = kind == OpKind::copy ? copy_op(CopyDirection::d2d, HostMemory::none) : plain_op(kind);
    expect_invalid(with(op, [](OpDescriptor& o) { o.grid[0] = 1; }), "launch geometry");
    expect_invalid(with(op, [](OpDescriptor& o) { o.block[2] = 1; }), "launch geometry");
    expect_invalid(with(op, [](OpDescriptor& o) { o.arg_count = 1; }), "launch geometry");
    expect_invalid(with(op, [](OpDescriptor& o) { o.param_bytes = 8; }), "launch geometry");
  }
  expect_invalid(with(plain_op(OpKind::sync), [](OpDescriptor& o) { o.kernel_id = 1; }), "kernel id");
}

TEST(ValidateOp, RejectsCopyFieldsOnMarksAndBadMemsets) {
  expect_invalid(with(plain_op(OpKind::memset), [](OpDescriptor& o) { o.direction = CopyDirection::h2d; }), "memset");
  expect_invalid(with(plain_op(OpKind::memset), [](OpDescriptor& o) { o.host_memory = HostMemory::pinned; }),
                 "memset");
  expect_invalid(with(plain_op(OpKind::sync), [](OpDescriptor& o) { o.bytes = 4; }), "copy fields");
  expect_invalid(with(plain_op(OpKind::graph), [](OpDescriptor& o) { o.direction = CopyDirection::d2d; }),
                 "copy fields");
  expect_invalid(with(plain_op(OpKind::query_end), [](OpDescriptor& o) { o.host_memory = HostMemory::pageable; }),
                 "copy fields");
}

TEST(ValidateCompletion, AcceptsPostedSeqsAndIntervals) {
  EXPECT_TRUE(validate_completion(CompletionDescriptor{5, 100, 200, 0, 0}, 5));
  EXPECT_TRUE(validate_completion(CompletionDescriptor{1, 0, 0, 700, 0xffffffff}, 5));  // failed op, reserved set
}

TEST(ValidateCompletion, RejectsBadFields) {
  Status never_posted = validate_completion(CompletionDescriptor{6, 100, 200, 0, 0}, 5);
  ASSERT_FALSE(never_posted);
  EXPECT_NE(never_posted.error().find("seq 6 was never posted"), std::string::npos) << never_posted.error();
  EXPECT_FALSE(validate_completion(CompletionDescriptor{0, 100, 200, 0, 0}, 5));
  Status backwards = validate_completion(CompletionDescriptor{5, 300, 200, 0, 0}, 5);
  ASSERT_FALSE(backwards);
  EXPECT_NE(backwards.error().find("not an interval"), std::string::npos) << backwards.error();
  EXPECT_FALSE(validate_completion(CompletionDescriptor{5, -1, 200, 0, 0}, 5));
}

}  // namespace
}  // namespace gpuqos::ipc
