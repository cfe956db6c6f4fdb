// Unit tests of simgpud's message decoding (simgpu/server/decode.h): valid messages of every
// type, and the garbage a hostile or broken client may send.
#include "decode.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace gpuqos::simgpu::server {
namespace {

constexpr std::uint32_t kDevices = 2;

// A record as the server receives it: header (whose size may lie) + payload.
std::vector<std::byte> record(wire::MsgType type, const void* head, std::size_t bytes, const void* tail = nullptr,
                              std::size_t tail_bytes = 0, std::optional<std::uint32_t> size_field = {}) {
  wire::MsgHeader header{type, size_field.value_or(static_cast<std::uint32_t>(bytes + tail_bytes))};
  std::vector<std::byte> out(sizeof header + bytes + tail_bytes);
  std::memcpy(out.data(), &header, sizeof header);
  if (bytes) std::memcpy(out.data() + sizeof header, head, bytes);
  if (tail_bytes) std::memcpy(out.data() + sizeof header + bytes, tail, tail_bytes);
  return out;
}

template <class T>
Decoded decode(wire::MsgType type, const T& head) {
  return decode_message(record(type, &head, sizeof head), kDevices);
}

wire::Submit kernel_submit(std::uint64_t op) {
  wire::Submit submit{op, 1, 0, {}};
  submit.spec.kind = wire::WireOpKind::kernel;
  submit.spec.blocks = 4;
  return submit;
}

TEST(ServerDecode, AcceptsEveryWellFormedMessage) {
  wire::Hello hello{wire::kMagic, wire::kVersionMajor, wire::kVersionMinor, 42, 0};
  auto decoded = decode(wire::MsgType::hello, hello);
  ASSERT_TRUE(decoded.request) << decoded.error;
  EXPECT_EQ(std::get<wire::Hello>(*decoded.request).pid, 42u);

  EXPECT_TRUE(decode(wire::MsgType::create_context, wire::CreateContext{1, 1}).request);
  EXPECT_TRUE(decode(wire::MsgType::destroy_context, wire::DestroyContext{1}).request);
  EXPECT_TRUE(decode(wire::MsgType::create_stream, wire::CreateStream{1, 1, wire::WireStreamKind::non_blocking}).request);
  EXPECT_TRUE(decode(wire::MsgType::destroy_stream, wire::DestroyStream{1}).request);
  EXPECT_TRUE(decode(wire::MsgType::host_func_done, wire::HostFuncDone{5}).request);
  EXPECT_TRUE(decode(wire::MsgType::mem_alloc, wire::MemAlloc{1, 1, 0, 100}).request);
  EXPECT_TRUE(decode(wire::MsgType::mem_free, wire::MemFree{0, 0, 100}).request);
  EXPECT_TRUE(decode(wire::MsgType::mem_info, wire::MemInfo{1, 0, 0}).request);
  EXPECT_TRUE(decode(wire::MsgType::stats, wire::StatsRequest{1}).request);

  std::string name = "sm90_xmma_gemm";
  wire::RegisterKernel reg{3, 7, static_cast<std::uint32_t>(name.size())};
  decoded = decode_message(record(wire::MsgType::register_kernel, &reg, sizeof reg, name.data(), name.size()), kDevices);
  ASSERT_TRUE(decoded.request) << decoded.error;
  EXPECT_EQ(std::get<RegisterKernelRequest>(*decoded.request).name, name);

  decoded = decode(wire::MsgType::submit, kernel_submit(1));
  ASSERT_TRUE(decoded.request) << decoded.error;
  EXPECT_EQ(std::get<SubmitRequest>(*decoded.request).head.spec.blocks, 4u);
}

TEST(ServerDecode, WaitAndGraphTails) {
  wire::Submit wait{2, 1, 2, {}};
  wait.spec.kind = wire::WireOpKind::wait;
  std::uint64_t deps[2] = {1, 7};
  auto decoded = decode_message(record(wire::MsgType::submit, &wait, sizeof wait, deps, sizeof deps), kDevices);
  ASSERT_TRUE(decoded.request) << decoded.error;
  EXPECT_EQ(std::get<SubmitRequest>(*decoded.request).wait_for, (std::vector<std::uint64_t>{1, 7}));

  deps[1] = kClientOpIdLimit;
  EXPECT_FALSE(decode_message(record(wire::MsgType::submit, &wait, sizeof wait, deps, sizeof deps), kDevices).request);
  wait.extra = 1;  // says one, carries two
  deps[1] = 7;
  EXPECT_FALSE(decode_message(record(wire::MsgType::submit, &wait, sizeof wait, deps, sizeof deps), kDevices).request);
  wait.extra = wire::kMaxWaitDeps + 1;
  std::vector<std::uint64_t> many(wait.extra, 1);
  EXPECT_FALSE(
      decode_message(record(wire::MsgType::submit, &wait, sizeof wait, many.data(), many.size() * 8), kDevices).request);

  wire::Submit graph{3, 1, 2, {}};
  graph.spec.kind = wire::WireOpKind::graph;
  wire::WireOp nodes[2] = {kernel_submit(1).spec, {}};
  nodes[1].kind = wire::WireOpKind::copy;
  nodes[1].bytes = 4096;
  decoded = decode_message(record(wire::MsgType::submit, &graph, sizeof graph, nodes, sizeof nodes), kDevices);
  ASSERT_TRUE(decoded.request) << decoded.error;
  EXPECT_EQ(std::get<SubmitRequest>(*decoded.request).graph_nodes.size(), 2u);
  nodes[1].kind = wire::WireOpKind::host_func;  // not allowed inside a graph
  EXPECT_FALSE(decode_message(record(wire::MsgType::submit, &graph, sizeof graph, nodes, sizeof nodes), kDevices).request);
}

TEST(ServerDecode, RejectsBadFraming) {
  std::byte tiny[3]{};
  EXPECT_FALSE(decode_message(tiny, kDevices).request);
  wire::StatsRequest stats{1};
  EXPECT_FALSE(decode_message(record(wire::MsgType::stats, &stats, sizeof stats, nullptr, 0, 9), kDevices).request);
  EXPECT_FALSE(decode_message(record(wire::MsgType::stats, &stats, 4), kDevices).request);  // short payload
  EXPECT_FALSE(decode_message(record(static_cast<wire::MsgType>(0), &stats, sizeof stats), kDevices).request);
  EXPECT_FALSE(decode_message(record(wire::MsgType::completion, &stats, sizeof stats), kDevices).request);
  std::vector<std::byte> huge(wire::kMaxPayload + 1);
  EXPECT_FALSE(decode_message(record(wire::MsgType::stats, huge.data(), huge.size()), kDevices).request);
}

TEST(ServerDecode, RejectsBadFields) {
  EXPECT_FALSE(decode(wire::MsgType::create_context, wire::CreateContext{1, kDevices}).request);
  EXPECT_FALSE(decode(wire::MsgType::mem_alloc, wire::MemAlloc{1, kDevices, 0, 1}).request);
  EXPECT_FALSE(decode(wire::MsgType::mem_info, wire::MemInfo{1, 99, 0}).request);
  EXPECT_FALSE(decode(wire::MsgType::create_stream, wire::CreateStream{1, 1, static_cast<wire::WireStreamKind>(3)}).request);
  EXPECT_FALSE(decode(wire::MsgType::host_func_done, wire::HostFuncDone{0}).request);
  wire::Hello observer{wire::kMagic, wire::kVersionMajor, wire::kVersionMinor, 1, 2};
  EXPECT_FALSE(decode(wire::MsgType::hello, observer).request);

  EXPECT_FALSE(decode(wire::MsgType::submit, kernel_submit(0)).request);
  EXPECT_FALSE(decode(wire::MsgType::submit, kernel_submit(kClientOpIdLimit)).request);
  auto bad = kernel_submit(1);
  bad.spec.blocks = 0;
  EXPECT_FALSE(decode(wire::MsgType::submit, bad).request);
  bad = kernel_submit(1);
  bad.spec.kind = static_cast<wire::WireOpKind>(7);
  EXPECT_FALSE(decode(wire::MsgType::submit, bad).request);
  bad = kernel_submit(1);
  bad.spec.engine = static_cast<wire::WireEngine>(3);
  EXPECT_FALSE(decode(wire::MsgType::submit, bad).request);
  bad = kernel_submit(1);
  bad.spec.has_duration_arg = 2;
  EXPECT_FALSE(decode(wire::MsgType::submit, bad).request);
  bad = kernel_submit(1);
  bad.extra = 1;  // a kernel carries no tail
  EXPECT_FALSE(decode(wire::MsgType::submit, bad).request);

  wire::RegisterKernel reg{1, 1, 0};
  EXPECT_FALSE(decode(wire::MsgType::register_kernel, reg).request);
  reg.name_len = wire::kMaxKernelName + 1;
  std::string name(reg.name_len, 'k');
  EXPECT_FALSE(
      decode_message(record(wire::MsgType::register_kernel, &reg, sizeof reg, name.data(), name.size()), kDevices)
          .request);
  reg.name_len = 5;  // says five, carries four
  EXPECT_FALSE(decode_message(record(wire::MsgType::register_kernel, &reg, sizeof reg, "abcd", 4), kDevices).request);
}

TEST(ServerDecode, OtherVersionHelloDecodesSoItCanBeRefused) {
  struct {
    std::uint32_t magic;
    std::uint16_t major;
    std::uint16_t minor;
  } old_hello{wire::kMagic, wire::kVersionMajor + 1, 0};
  auto decoded = decode_message(record(wire::MsgType::hello, &old_hello, sizeof old_hello), kDevices);
  ASSERT_TRUE(decoded.request) << decoded.error;
  EXPECT_EQ(std::get<wire::Hello>(*decoded.request).version_major, wire::kVersionMajor + 1);
  // The current version must be exact.
  wire::Hello current{wire::kMagic, wire::kVersionMajor, wire::kVersionMinor, 1, 0};
  EXPECT_FALSE(decode_message(record(wire::MsgType::hello, &current, sizeof current - 1), kDevices).request);
  EXPECT_FALSE(decode_message(record(wire::MsgType::hello, &current, 6), kDevices).request);
}

TEST(ServerDecode, RandomBytesNeverCrash) {
  std::mt19937_64 rng(7);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> message(rng() % 200);
    for (auto& b : message) b = static_cast<std::byte>(rng());
    if (message.size() >= sizeof(wire::MsgHeader) && i % 2 == 0) {  // plausible framing, random body
      wire::MsgHeader header{static_cast<wire::MsgType>(1 + rng() % 12),
                             static_cast<std::uint32_t>(message.size() - sizeof(wire::MsgHeader))};
      std::memcpy(message.data(), &header, sizeof header);
    }
    Decoded decoded = decode_message(message, kDevices);
    EXPECT_NE(decoded.request.has_value(), !decoded.error.empty());
    accepted += decoded.request.has_value();
  }
  EXPECT_LT(accepted, 20000);
}

}  // namespace
}  // namespace gpuqos::simgpu::server
