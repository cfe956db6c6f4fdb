// Integration tests of simgpu's libcuda.so.1: real driver-API client processes on a real simgpud.
//
// This binary links the simulated driver, but the test process never calls cuInit: each scenario
// runs its CUDA calls in forked clients that report back (driver_itest_harness.h), against a
// simgpud of its own on a private socket.
//
// Timing assertions compare CUDA event times (the device's clock, exact in the model) with tight
// tolerances, and wall-clock times only with margins that absorb a loaded 2-core machine.
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "simgpu/driver_itest_harness.h"

namespace {

using namespace gpuqos::simgpu::itest;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ull << 20;

// Kernels of the test module: `spin` takes its first parameter as its duration in microseconds.
constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 spin_duration_us) { ret; }
.visible .entry three_params(.param .u64 first, .param .u32 second, .param .u64 third) { ret; }
)";

constexpr const char* kCatalog = R"({
  "kernels": [{"match": "^spin$", "model": "from_arg", "arg": 0, "unit": "us"}],
  "default_us": 10,
  "noise_cv": 0
})";

// A one-device profile: 8 SMs in `mode`, plus any extra TOML lines.
std::string profile(const std::string& mode, const std::string& extra = "") {
  return "name = \"itest gpu\"\nsms = 8\ncompute_mode = \"" + mode + "\"\n" + extra + "\n";
}

// ---------------------------------------------------------------------------------------------
// Client-side helpers.

// cuInit, then device `ordinal`'s primary context made current.
bool open_device(ClientLink& c, int ordinal = 0) {
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  return CLIENT_OK(c, cuInit(0)) && CLIENT_OK(c, cuDeviceGet(&device, ordinal)) &&
         CLIENT_OK(c, cuDevicePrimaryCtxRetain(&ctx, device)) && CLIENT_OK(c, cuCtxSetCurrent(ctx));
}

bool load_kernel(ClientLink& c, const char* name, CUfunction* function) {
  CUmodule module = nullptr;
  return CLIENT_OK(c, cuModuleLoadData(&module, kPtx)) && CLIENT_OK(c, cuModuleGetFunction(function, module, name));
}

CUresult launch_spin(CUfunction spin, std::uint64_t duration_us, unsigned blocks, CUstream stream) {
  void* params[] = {&duration_us};
  return cuLaunchKernel(spin, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr);
}

// Holds a stream at a host function until open(): work submitted behind it then reaches the
// device all at once, so event timings do not depend on how fast this process submitted it.
// The host function blocks the driver's callback thread meanwhile (the receiver, or the mover when
// data moves are queued ahead of it): open() before waiting on anything. The destructor opens it too, so an early return cannot leave the thread blocked.
class StreamGate {
 public:
  StreamGate() = default;
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  ~StreamGate() { open(); }

  CUresult close(CUstream stream) { return cuLaunchHostFunc(stream, &StreamGate::wait, this); }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  static void wait(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    std::unique_lock lock(gate->mu_);
    gate->cv_.wait(lock, [gate] { return gate->open_; });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Device time between two recorded events, in ms (-1 when the driver refuses).
double elapsed_ms(CUevent start, CUevent end) {
  float ms = -1;
  return cuEventElapsedTime(&ms, start, end) == CUDA_SUCCESS ? ms : -1;
}

class DriverItest : public ::testing::Test {
 protected:
  void start(const std::string& profile_toml) { server_ = std::make_unique<SimgpudServer>(profile_toml, kCatalog); }
  SimgpudServer& server() { return *server_; }

  void TearDown() override {
    if (server_ && HasFailure()) std::cerr << "---- simgpud log ----\n" << server_->log_text() << "---------------------\n";
    server_.reset();
  }

  std::unique_ptr<SimgpudServer> server_;
};

// ---------------------------------------------------------------------------------------------
// 1. Two processes share one device: the compute mode decides how their kernels interleave.

constexpr double kPairKernelMs = 100;

// One client's view of its kernel: event-timed (device clock) and wall-clock times.
struct KernelTiming {
  double launch_ms = 0;  // wall clock, when the client let its kernel go
  double end_ms = 0;     // wall clock, when cuEventSynchronize returned
  double event_ms = 0;   // device time from the event before the kernel to the one after
};

// A client that launches one `spin` of kPairKernelMs on `blocks` blocks when the test says go:
// the kernel and its events wait behind a gate that opens then.
void timed_spin_client(ClientLink& c, unsigned blocks) {
  CUfunction spin = nullptr;
  CUstream stream = nullptr;
  CUevent start = nullptr, end = nullptr;
  if (!open_device(c) || !load_kernel(c, "spin", &spin)) return;
  if (!CLIENT_OK(c, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) || !CLIENT_OK(c, cuEventCreate(&start, 0)) ||
      !CLIENT_OK(c, cuEventCreate(&end, 0))) {
    return;
  }
  StreamGate gate;
  CLIENT_OK(c, gate.close(stream));
  CLIENT_OK(c, cuEventRecord(start, stream));
  CLIENT_OK(c, launch_spin(spin, static_cast<std::uint64_t>(kPairKernelMs * 1000), blocks, stream));
  CLIENT_OK(c, cuEventRecord(end, stream));
  c.ready();
  c.wait_go();
  double launch_ms = now_ms();
  gate.open();
  CLIENT_OK(c, cuEventSynchronize(end));
  c.report("end_ms", now_ms());
  c.report("launch_ms", launch_ms);
  c.report("event_ms", elapsed_ms(start, end));
}

// Runs two timed_spin_clients that launch together; their timings, the first launcher first.
std::vector<KernelTiming> run_kernel_pair(SimgpudServer& server, unsigned blocks) {
  ClientProcess a(server.socket(), [&](ClientLink& c) { timed_spin_client(c, blocks); });
  ClientProcess b(server.socket(), [&](ClientLink& c) { timed_spin_client(c, blocks); });
  if (!a.wait_ready() || !b.wait_ready()) {
    ADD_FAILURE() << "clients did not get ready";
    return {};
  }
  a.go();
  b.go();
  std::vector<KernelTiming> timings;
  for (ClientProcess* client : {&a, &b}) {
    ClientOutcome outcome = client->finish();
    expect_clean(outcome, "client");
    timings.push_back({outcome.number("launch_ms"), outcome.number("end_ms"), outcome.number("event_ms")});
  }
  std::sort(timings.begin(), timings.end(), [](auto& x, auto& y) { return x.launch_ms < y.launch_ms; });
  return timings;
}

// The device's compute_busy_ns covers exactly the two kernels' work, and nothing else ran.
void expect_busy_ms(SimgpudServer& server, double busy_ms, std::uint64_t kernels) {
  EXPECT_EQ(server.device_stat("kernels_completed"), static_cast<std::int64_t>(kernels));
  EXPECT_NEAR(static_cast<double>(server.device_stat("compute_busy_ns")) / 1e6, busy_ms, 1.0);
}

TEST_F(DriverItest, FifoRunsTheSecondProcessKernelAfterTheFirst) {
  start(profile("fifo"));
  std::vector<KernelTiming> t = run_kernel_pair(server(), 8);
  ASSERT_EQ(t.size(), 2u);
  double skew_ms = t[1].launch_ms - t[0].launch_ms;
  ASSERT_LT(skew_ms, kPairKernelMs / 2) << "the clients did not launch together; the machine is too loaded";
  auto [first, second] = std::minmax(t[0].event_ms, t[1].event_ms);
  // One kernel ran alone at once; the other waited for all of it, then ran alone.
  EXPECT_NEAR(first, kPairKernelMs, 1.0);
  EXPECT_GT(second, 1.5 * kPairKernelMs);
  EXPECT_LT(second, 2 * kPairKernelMs + 1.0);
  // Wall clock (noisy on a loaded machine): the waiting kernel ended about one kernel later.
  double end_gap_ms = std::abs(t[1].end_ms - t[0].end_ms);
  EXPECT_GT(end_gap_ms, 0.5 * kPairKernelMs);
  EXPECT_LT(end_gap_ms, 1.5 * kPairKernelMs);
  expect_busy_ms(server(), 2 * kPairKernelMs, 2);
  EXPECT_EQ(server().device_stat("context_switches"), 0);
}

TEST_F(DriverItest, TimesliceAlternatesTwoProcessesInQuanta) {
  constexpr double kQuantumMs = 50;
  start(profile("timeslice", "timeslice_us = 50000"));
  std::vector<KernelTiming> t = run_kernel_pair(server(), 8);
  ASSERT_EQ(t.size(), 2u);
  ASSERT_LT(t[1].launch_ms - t[0].launch_ms, kQuantumMs / 2) << "the clients did not launch together";
  auto [first, second] = std::minmax(t[0].event_ms, t[1].event_ms);
  // Both were slowed to about half speed. The context that got the device first finishes one
  // quantum before the end: 2 quanta each, alternating, so 3 quanta after its launch.
  EXPECT_NEAR(first, 2 * kPairKernelMs - kQuantumMs, 1.0);
  EXPECT_GT(second, 2 * kPairKernelMs - kQuantumMs);
  EXPECT_LT(second, 2 * kPairKernelMs + 1.0);
  expect_busy_ms(server(), 2 * kPairKernelMs, 2);
  std::int64_t switches = server().device_stat("context_switches");
  EXPECT_GE(switches, 2);  // A B A B: 3 switches
  EXPECT_LE(switches, 4);
}

TEST_F(DriverItest, MpsSharesTheSmsOfFullDeviceKernels) {
  start(profile("mps"));
  std::vector<KernelTiming> t = run_kernel_pair(server(), 8);  // each wants all 8 SMs
  ASSERT_EQ(t.size(), 2u);
  ASSERT_LT(t[1].launch_ms - t[0].launch_ms, kPairKernelMs / 2) << "the clients did not launch together";
  // Half the SMs each while both run: whatever the launch skew, both end together, after ~2d.
  EXPECT_NEAR(t[0].event_ms, t[1].event_ms, 1.0);
  for (const KernelTiming& timing : t) {
    EXPECT_GT(timing.event_ms, 1.5 * kPairKernelMs);
    EXPECT_LT(timing.event_ms, 2 * kPairKernelMs + 1.0);
  }
  EXPECT_NEAR(t[0].end_ms, t[1].end_ms, 0.5 * kPairKernelMs);  // wall clock: noisy
  expect_busy_ms(server(), 2 * kPairKernelMs, 2);
}

TEST_F(DriverItest, MpsRunsKernelsThatFitSideBySide) {
  start(profile("mps"));
  std::vector<KernelTiming> t = run_kernel_pair(server(), 4);  // 4 + 4 of 8 SMs
  ASSERT_EQ(t.size(), 2u);
  for (const KernelTiming& timing : t) EXPECT_NEAR(timing.event_ms, kPairKernelMs, 1.0);
  EXPECT_EQ(server().device_stat("kernels_completed"), 2);
}

// ---------------------------------------------------------------------------------------------
// 2. Copies and memsets move exactly the bytes they should, in stream and event order.

std::vector<std::uint8_t> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>((i * 131 + seed * 7 + i / 251) & 0xff);
  return data;
}

bool equal_bytes(const void* a, const void* b, std::size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

template <class T>
bool all_equal(const void* p, std::size_t count, T value) {
  const auto* bytes = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < count; ++i) {
    T x;
    std::memcpy(&x, bytes + i * sizeof(T), sizeof(T));
    if (x != value) return false;
  }
  return true;
}

constexpr std::size_t kCopyBytes = 1 * kMiB;

void sync_copies_client(ClientLink& c) {
  if (!open_device(c)) return;
  CUdeviceptr a = 0, b = 0, unified = 0;
  if (!CLIENT_OK(c, cuMemAlloc(&a, kCopyBytes)) || !CLIENT_OK(c, cuMemAlloc(&b, kCopyBytes)) ||
      !CLIENT_OK(c, cuMemAlloc(&unified, kCopyBytes))) {
    return;
  }
  auto source = pattern(kCopyBytes, 1);
  std::vector<std::uint8_t> back(kCopyBytes, 0);
  CLIENT_OK(c, cuMemcpyHtoD(a, source.data(), kCopyBytes));
  CLIENT_OK(c, cuMemcpyDtoH(back.data(), a, kCopyBytes));
  CLIENT_CHECK(c, back == source);

  std::vector<std::uint8_t> via_d2d(kCopyBytes, 0);
  CLIENT_OK(c, cuMemcpyDtoD(b, a, kCopyBytes));
  CLIENT_OK(c, cuMemcpyDtoH(via_d2d.data(), b, kCopyBytes));
  CLIENT_CHECK(c, via_d2d == source);

  // cuMemcpy infers the direction from unified addresses: host -> device -> host.
  auto other = pattern(kCopyBytes, 2);
  std::vector<std::uint8_t> via_unified(kCopyBytes, 0);
  CLIENT_OK(c, cuMemcpy(unified, reinterpret_cast<CUdeviceptr>(other.data()), kCopyBytes));
  CLIENT_OK(c, cuMemcpy(reinterpret_cast<CUdeviceptr>(via_unified.data()), unified, kCopyBytes));
  CLIENT_CHECK(c, via_unified == other);

  // Memsets write exactly their elements: the bytes around them keep the D8 fill.
  CLIENT_OK(c, cuMemsetD8(a, 0xab, kCopyBytes));
  CLIENT_OK(c, cuMemsetD16(a + 2, 0x1234, 10));
  CLIENT_OK(c, cuMemsetD32(a + 64, 0xdeadbeef, 8));
  CLIENT_OK(c, cuMemcpyDtoH(back.data(), a, kCopyBytes));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(back.data(), 2, 0xab));
  CLIENT_CHECK(c, all_equal<std::uint16_t>(back.data() + 2, 10, 0x1234));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(back.data() + 22, 42, 0xab));
  CLIENT_CHECK(c, all_equal<std::uint32_t>(back.data() + 64, 8, 0xdeadbeef));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(back.data() + 96, kCopyBytes - 96, 0xab));
}

// 2D copies: a 40 x 30 window of a host image into a pitched allocation (at its row 2, byte 8) and
// back into another image, sync and async from pageable memory (staged: the source is overwritten
// as soon as the call returns), device to device, and through unified addresses. The bytes outside
// the window are never touched.
void copies_2d_client(ClientLink& c) {
  if (!open_device(c)) return;
  constexpr std::size_t kWidth = 40, kHeight = 30, kImagePitch = 64, kImageBytes = kImagePitch * (kHeight + 4);
  CUdeviceptr pitched = 0, other = 0;
  std::size_t pitch = 0;
  if (!CLIENT_OK(c, cuMemAllocPitch(&pitched, &pitch, kWidth + 8, kHeight + 2, 4)) ||
      !CLIENT_OK(c, cuMemAlloc(&other, pitch * (kHeight + 2)))) {
    return;
  }
  CLIENT_CHECK(c, pitch >= kWidth + 8 && pitch % 512 == 0);
  CUstream stream = nullptr;
  if (!CLIENT_OK(c, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING))) return;
  CLIENT_OK(c, cuMemsetD8(pitched, 0xee, pitch * (kHeight + 2)));
  const auto source = pattern(kImageBytes, 4);
  const auto copy_of = [&](CUmemorytype src_type, const void* src_host, CUdeviceptr src_device, std::size_t src_pitch,
                           std::size_t src_x, std::size_t src_y, CUmemorytype dst_type, void* dst_host,
                           CUdeviceptr dst_device, std::size_t dst_pitch, std::size_t dst_x, std::size_t dst_y) {
    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = src_type;
    copy.srcHost = src_host;
    copy.srcDevice = src_device;
    copy.srcPitch = src_pitch;
    copy.srcXInBytes = src_x;
    copy.srcY = src_y;
    copy.dstMemoryType = dst_type;
    copy.dstHost = dst_host;
    copy.dstDevice = dst_device;
    copy.dstPitch = dst_pitch;
    copy.dstXInBytes = dst_x;
    copy.dstY = dst_y;
    copy.WidthInBytes = kWidth;
    copy.Height = kHeight;
    return copy;
  };
  // The window of `image` at (x, y) holds the source's at (1, 1); everything else is `fill`.
  const auto window_holds_source = [&](const std::vector<std::uint8_t>& image, std::size_t x, std::size_t y,
                                       std::uint8_t fill) {
    for (std::size_t row = 0; row < kHeight + 4; ++row) {
      for (std::size_t col = 0; col < kImagePitch; ++col) {
        const bool inside = row >= y && row < y + kHeight && col >= x && col < x + kWidth;
        const std::uint8_t want = inside ? source[(row - y + 1) * kImagePitch + col - x + 1] : fill;
        if (image[row * kImagePitch + col] != want) return false;
      }
    }
    return true;
  };
  // Host (1, 1) -> device (8, 2), sync; device -> host (3, 2), sync.
  auto in = copy_of(CU_MEMORYTYPE_HOST, source.data(), 0, kImagePitch, 1, 1, CU_MEMORYTYPE_DEVICE, nullptr, pitched, pitch, 8, 2);
  CLIENT_OK(c, cuMemcpy2D(&in));
  std::vector<std::uint8_t> back(kImageBytes, 0);
  auto out = copy_of(CU_MEMORYTYPE_DEVICE, nullptr, pitched, pitch, 8, 2, CU_MEMORYTYPE_HOST, back.data(), 0, kImagePitch, 3, 2);
  CLIENT_OK(c, cuMemcpy2D(&out));
  CLIENT_CHECK(c, window_holds_source(back, 3, 2, 0));
  std::vector<std::uint8_t> row_before(pitch);
  CLIENT_OK(c, cuMemcpyDtoH(row_before.data(), pitched + pitch, pitch));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(row_before.data(), pitch, 0xee));  // row 1: outside the window
  // Device -> device, then async from pageable memory overwritten at once (a pattern of its own,
  // read back below), then unified addresses.
  auto d2d = copy_of(CU_MEMORYTYPE_DEVICE, nullptr, pitched, pitch, 8, 2, CU_MEMORYTYPE_DEVICE, nullptr, other, pitch, 0, 0);
  CLIENT_OK(c, cuMemcpy2DAsync(&d2d, stream));
  std::vector<std::uint8_t> scratch = source;
  for (std::uint8_t& byte : scratch) byte ^= 0x5a;
  auto staged = copy_of(CU_MEMORYTYPE_HOST, scratch.data(), 0, kImagePitch, 1, 1, CU_MEMORYTYPE_DEVICE, nullptr, pitched, pitch, 0, 0);
  CLIENT_OK(c, cuMemcpy2DAsync(&staged, stream));
  std::fill(scratch.begin(), scratch.end(), 0x55);
  std::vector<std::uint8_t> via_unified(kImageBytes, 9);
  auto unified = copy_of(CU_MEMORYTYPE_UNIFIED, nullptr, pitched, pitch, 0, 0, CU_MEMORYTYPE_UNIFIED, nullptr,
                         reinterpret_cast<CUdeviceptr>(via_unified.data()), kImagePitch, 0, 0);
  CLIENT_OK(c, cuMemcpy2DAsync(&unified, stream));
  std::vector<std::uint8_t> via_d2d(kImageBytes, 9);
  auto from_other = copy_of(CU_MEMORYTYPE_DEVICE, nullptr, other, pitch, 0, 0, CU_MEMORYTYPE_HOST, via_d2d.data(), 0, kImagePitch, 0, 0);
  CLIENT_OK(c, cuMemcpy2DAsync(&from_other, stream));
  CLIENT_OK(c, cuStreamSynchronize(stream));
  for (std::uint8_t& byte : via_unified) byte ^= 0x5a;  // the staged pattern back to the source's
  CLIENT_CHECK(c, window_holds_source(via_unified, 0, 0, std::uint8_t{9 ^ 0x5a}));
  CLIENT_CHECK(c, window_holds_source(via_d2d, 0, 0, 9));
  // Bad input, refused before anything moves: a pitch under the width, or under the width plus X;
  // a device side outside its allocation; a unified or host side that starts in an allocation and
  // runs past its end (a review crashed the process with one); pitches and offsets that wrap the
  // address space or pass the device's maximum pitch; a CUDA array.
  auto narrow = in;
  narrow.dstPitch = kWidth - 1;
  CLIENT_CHECK(c, cuMemcpy2D(&narrow) == CUDA_ERROR_INVALID_VALUE);
  auto past_pitch = in;
  past_pitch.dstXInBytes = pitch - kWidth + 1;
  CLIENT_CHECK(c, cuMemcpy2D(&past_pitch) == CUDA_ERROR_INVALID_VALUE);
  auto beyond = in;
  beyond.dstY = kHeight;
  CLIENT_CHECK(c, cuMemcpy2D(&beyond) == CUDA_ERROR_INVALID_VALUE);
  for (const CUmemorytype type : {CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_HOST}) {
    auto overrun = in;
    overrun.dstMemoryType = type;
    overrun.dstHost = reinterpret_cast<void*>(pitched);
    overrun.dstY = kHeight;
    CLIENT_CHECK(c, cuMemcpy2D(&overrun) == CUDA_ERROR_INVALID_VALUE);
  }
  auto wrapping = in;
  wrapping.dstPitch = std::size_t{1} << 63;
  CLIENT_CHECK(c, cuMemcpy2D(&wrapping) == CUDA_ERROR_INVALID_VALUE);
  wrapping.dstPitch = pitch;
  wrapping.dstY = std::size_t{1} << 62;
  CLIENT_CHECK(c, cuMemcpy2D(&wrapping) == CUDA_ERROR_INVALID_VALUE);
  auto huge = in;
  huge.Height = std::size_t{1} << 40;
  huge.WidthInBytes = std::size_t{1} << 30;
  CLIENT_CHECK(c, cuMemcpy2D(&huge) == CUDA_ERROR_INVALID_VALUE);
  auto array = in;
  array.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  CLIENT_CHECK(c, cuMemcpy2D(&array) == CUDA_ERROR_NOT_SUPPORTED);
  CUdeviceptr unused = 0;
  CLIENT_CHECK(c, cuMemAllocPitch(&unused, &pitch, kWidth, kHeight, 3) == CUDA_ERROR_INVALID_VALUE);
}

// 3D copies: a 40 x 12 x 4 box of a host volume (48-byte rows, 20-row slices; from (3, 2, 1)) into a
// pitched allocation of 16-row slices (at (8, 1, 1)) and back out of it the same ways as the 2D
// copies above; only the box moves. Then the calls the driver refuses whole.
void copies_3d_client(ClientLink& c) {
  if (!open_device(c)) return;
  constexpr std::size_t kWidth = 40, kHeight = 12, kDepth = 4;
  constexpr std::size_t kPitch = 48, kRows = 20, kSlices = 6, kVolumeBytes = kPitch * kRows * kSlices;
  constexpr std::size_t kDeviceRows = 16;
  CUdeviceptr pitched = 0, other = 0;
  std::size_t pitch = 0;
  if (!CLIENT_OK(c, cuMemAllocPitch(&pitched, &pitch, kWidth + 8, kDeviceRows * kSlices, 4)) ||
      !CLIENT_OK(c, cuMemAlloc(&other, pitch * kHeight * kDepth))) {
    return;
  }
  CUstream stream = nullptr;
  if (!CLIENT_OK(c, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING))) return;
  CLIENT_OK(c, cuMemsetD8(pitched, 0xee, pitch * kDeviceRows * kSlices));
  const auto source = pattern(kVolumeBytes, 6);
  struct Place {
    CUmemorytype type;
    const void* host;
    CUdeviceptr device;
    std::size_t pitch, rows, x, y, z;
  };
  const auto copy_of = [&](const Place& from, const Place& to) {
    CUDA_MEMCPY3D copy{};
    copy.srcMemoryType = from.type;
    copy.srcHost = from.host;
    copy.srcDevice = from.device;
    copy.srcPitch = from.pitch;
    copy.srcHeight = from.rows;
    copy.srcXInBytes = from.x;
    copy.srcY = from.y;
    copy.srcZ = from.z;
    copy.dstMemoryType = to.type;
    copy.dstHost = const_cast<void*>(to.host);
    copy.dstDevice = to.device;
    copy.dstPitch = to.pitch;
    copy.dstHeight = to.rows;
    copy.dstXInBytes = to.x;
    copy.dstY = to.y;
    copy.dstZ = to.z;
    copy.WidthInBytes = kWidth;
    copy.Height = kHeight;
    copy.Depth = kDepth;
    return copy;
  };
  // `volume` holds the source's box at the source's own place; everything else is `fill`.
  const auto box_holds_source = [&](const std::vector<std::uint8_t>& volume, std::uint8_t fill) {
    for (std::size_t i = 0; i < kVolumeBytes; ++i) {
      const std::size_t z = i / (kPitch * kRows), y = i / kPitch % kRows, x = i % kPitch;
      const bool inside = z >= 1 && z < 1 + kDepth && y >= 2 && y < 2 + kHeight && x >= 3 && x < 3 + kWidth;
      if (volume[i] != (inside ? source[i] : fill)) return false;
    }
    return true;
  };
  const Place host_source{CU_MEMORYTYPE_HOST, source.data(), 0, kPitch, kRows, 3, 2, 1};
  const Place device_box{CU_MEMORYTYPE_DEVICE, nullptr, pitched, pitch, kDeviceRows, 8, 1, 1};
  // Host -> device, sync; device -> host, sync.
  auto in = copy_of(host_source, device_box);
  CLIENT_OK(c, cuMemcpy3D(&in));
  std::vector<std::uint8_t> back(kVolumeBytes, 0);
  auto out = copy_of(device_box, {CU_MEMORYTYPE_HOST, back.data(), 0, kPitch, kRows, 3, 2, 1});
  CLIENT_OK(c, cuMemcpy3D(&out));
  CLIENT_CHECK(c, box_holds_source(back, 0));
  std::vector<std::uint8_t> slice_before(pitch * kDeviceRows);
  CLIENT_OK(c, cuMemcpyDtoH(slice_before.data(), pitched, slice_before.size()));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(slice_before.data(), slice_before.size(), 0xee));  // slice 0: outside the box
  // Device -> device (into slices of exactly the copy's height), async from pageable memory
  // overwritten at once (a pattern of its own, read back below), then unified addresses.
  const Place device_other{CU_MEMORYTYPE_DEVICE, nullptr, other, pitch, kHeight, 0, 0, 0};
  auto d2d = copy_of(device_box, device_other);
  CLIENT_OK(c, cuMemcpy3DAsync(&d2d, stream));
  std::vector<std::uint8_t> scratch = source;
  for (std::uint8_t& byte : scratch) byte ^= 0x5a;
  auto staged = copy_of({CU_MEMORYTYPE_HOST, scratch.data(), 0, kPitch, kRows, 3, 2, 1}, device_box);
  CLIENT_OK(c, cuMemcpy3DAsync(&staged, stream));
  std::fill(scratch.begin(), scratch.end(), 0x55);
  std::vector<std::uint8_t> via_unified(kVolumeBytes, 9), via_d2d(kVolumeBytes, 9);
  const Place unified_box{CU_MEMORYTYPE_UNIFIED, nullptr, pitched, pitch, kDeviceRows, 8, 1, 1};
  const Place unified_host{CU_MEMORYTYPE_UNIFIED, nullptr, reinterpret_cast<CUdeviceptr>(via_unified.data()), kPitch, kRows, 3, 2, 1};
  auto unified = copy_of(unified_box, unified_host);
  CLIENT_OK(c, cuMemcpy3DAsync(&unified, stream));
  auto from_other = copy_of(device_other, {CU_MEMORYTYPE_HOST, via_d2d.data(), 0, kPitch, kRows, 3, 2, 1});
  CLIENT_OK(c, cuMemcpy3DAsync(&from_other, stream));
  CLIENT_OK(c, cuStreamSynchronize(stream));
  for (std::uint8_t& byte : via_unified) byte ^= 0x5a;  // the staged pattern back to the source's
  CLIENT_CHECK(c, box_holds_source(via_unified, std::uint8_t{9 ^ 0x5a}));
  CLIENT_CHECK(c, box_holds_source(via_d2d, 9));
  // One slice needs no slice height.
  auto one_slice = in;
  one_slice.Depth = 1;
  one_slice.dstHeight = 0;
  CLIENT_OK(c, cuMemcpy3D(&one_slice));
  // Bad input, refused before anything moves: a pitch under the width; slices shorter than the
  // copy's rows from its Y; a box past its allocation; a level of detail or a reserved pointer;
  // slice heights that wrap the address space; a CUDA array.
  auto narrow = in;
  narrow.dstPitch = kWidth - 1;
  CLIENT_CHECK(c, cuMemcpy3D(&narrow) == CUDA_ERROR_INVALID_VALUE);
  auto overlapping = in;
  overlapping.dstHeight = kHeight;  // + dstY 1: each slice's last row would be the next one's first
  CLIENT_CHECK(c, cuMemcpy3D(&overlapping) == CUDA_ERROR_INVALID_VALUE);
  auto beyond = in;
  beyond.dstZ = kSlices - kDepth + 1;
  CLIENT_CHECK(c, cuMemcpy3D(&beyond) == CUDA_ERROR_INVALID_VALUE);
  auto detail = in;
  detail.srcLOD = 1;
  CLIENT_CHECK(c, cuMemcpy3D(&detail) == CUDA_ERROR_INVALID_VALUE);
  auto reserved = in;
  reserved.reserved0 = &reserved;
  CLIENT_CHECK(c, cuMemcpy3D(&reserved) == CUDA_ERROR_INVALID_VALUE);
  auto wrapping = in;
  wrapping.dstHeight = std::size_t{1} << 62;
  CLIENT_CHECK(c, cuMemcpy3D(&wrapping) == CUDA_ERROR_INVALID_VALUE);
  auto array = in;
  array.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  CLIENT_CHECK(c, cuMemcpy3D(&array) == CUDA_ERROR_NOT_SUPPORTED);
}

void async_copies_client(ClientLink& c) {
  CUfunction spin = nullptr;
  if (!open_device(c) || !load_kernel(c, "spin", &spin)) return;
  CUdeviceptr a = 0, b = 0;
  void* pinned_src = nullptr;
  void* pinned_dst = nullptr;
  CUstream stream = nullptr;
  if (!CLIENT_OK(c, cuMemAlloc(&a, kCopyBytes)) || !CLIENT_OK(c, cuMemAlloc(&b, kCopyBytes)) ||
      !CLIENT_OK(c, cuMemAllocHost(&pinned_src, kCopyBytes)) || !CLIENT_OK(c, cuMemAllocHost(&pinned_dst, kCopyBytes)) ||
      !CLIENT_OK(c, cuStreamCreate(&stream, 0))) {
    return;
  }
  // Pinned, both directions, ordered on one stream.
  auto source = pattern(kCopyBytes, 3);
  std::memcpy(pinned_src, source.data(), kCopyBytes);
  std::memset(pinned_dst, 0, kCopyBytes);
  CLIENT_OK(c, cuMemcpyHtoDAsync(a, pinned_src, kCopyBytes, stream));
  CLIENT_OK(c, cuMemcpyDtoHAsync(pinned_dst, a, kCopyBytes, stream));
  CLIENT_OK(c, cuStreamSynchronize(stream));
  CLIENT_CHECK(c, equal_bytes(pinned_dst, source.data(), kCopyBytes));

  // Pageable source: the call has staged the bytes when it returns, so reusing the buffer at
  // once does not change what reaches the device.
  auto pageable = pattern(kCopyBytes, 4);
  auto expected = pageable;
  CLIENT_OK(c, cuMemcpyHtoDAsync(b, pageable.data(), kCopyBytes, stream));
  std::fill(pageable.begin(), pageable.end(), 0xee);
  // Pageable destination: the call returns once the data is there, without a sync.
  std::vector<std::uint8_t> back(kCopyBytes, 0);
  CLIENT_OK(c, cuMemcpyDtoHAsync(back.data(), b, kCopyBytes, stream));
  CLIENT_CHECK(c, back == expected);

  // Host to host (unified addresses), 1-D and 2-D: synchronous whatever the call, as CUDA makes
  // them, so the data is there when it returns, though a 20-ms kernel was queued before it.
  auto host_source = pattern(kCopyBytes, 5);
  std::vector<std::uint8_t> host_copy(kCopyBytes, 0);
  CLIENT_OK(c, launch_spin(spin, 20'000, 1, stream));
  CLIENT_OK(c, cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(host_copy.data()),
                             reinterpret_cast<CUdeviceptr>(host_source.data()), kCopyBytes, stream));
  CLIENT_CHECK(c, host_copy == host_source);
  std::vector<std::uint8_t> host_rows(kCopyBytes, 0);
  CUDA_MEMCPY2D rows{};
  rows.srcMemoryType = rows.dstMemoryType = CU_MEMORYTYPE_HOST;
  rows.srcHost = host_source.data();
  rows.dstHost = host_rows.data();
  rows.srcPitch = rows.dstPitch = rows.WidthInBytes = 1024;
  rows.Height = kCopyBytes / 1024;
  CLIENT_OK(c, launch_spin(spin, 20'000, 1, stream));
  CLIENT_OK(c, cuMemcpy2DAsync(&rows, stream));
  CLIENT_CHECK(c, host_rows == host_source);

  // Async memsets, read back through the same stream.
  CLIENT_OK(c, cuMemsetD8Async(b, 0x5a, kCopyBytes, stream));
  CLIENT_OK(c, cuMemsetD16Async(b + 8, 0xbeef, 4, stream));
  CLIENT_OK(c, cuMemsetD32Async(b + 32, 0x01020304, 4, stream));
  CLIENT_OK(c, cuMemcpyDtoHAsync(pinned_dst, b, kCopyBytes, stream));
  CLIENT_OK(c, cuStreamSynchronize(stream));
  auto* dst = static_cast<std::uint8_t*>(pinned_dst);
  CLIENT_CHECK(c, all_equal<std::uint8_t>(dst, 8, 0x5a));
  CLIENT_CHECK(c, all_equal<std::uint16_t>(dst + 8, 4, 0xbeef));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(dst + 16, 16, 0x5a));
  CLIENT_CHECK(c, all_equal<std::uint32_t>(dst + 32, 4, 0x01020304));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(dst + 48, kCopyBytes - 48, 0x5a));

  // A kernel between two copies: the read-back waits for the kernel.
  CUevent before = nullptr, after = nullptr;
  CLIENT_OK(c, cuEventCreate(&before, 0));
  CLIENT_OK(c, cuEventCreate(&after, 0));
  std::memset(pinned_dst, 0, kCopyBytes);
  StreamGate gate;
  CLIENT_OK(c, gate.close(stream));
  CLIENT_OK(c, cuEventRecord(before, stream));
  CLIENT_OK(c, cuMemcpyHtoDAsync(a, pinned_src, kCopyBytes, stream));
  CLIENT_OK(c, launch_spin(spin, 100'000, 1, stream));
  CLIENT_OK(c, cuMemcpyDtoHAsync(pinned_dst, a, kCopyBytes, stream));
  CLIENT_OK(c, cuEventRecord(after, stream));
  gate.open();
  CLIENT_CU(c, cuStreamQuery(stream), CUDA_ERROR_NOT_READY);
  CLIENT_CHECK(c, all_equal<std::uint8_t>(pinned_dst, kCopyBytes, 0));  // not copied back yet
  CLIENT_OK(c, cuStreamSynchronize(stream));
  CLIENT_CHECK(c, equal_bytes(pinned_dst, source.data(), kCopyBytes));
  // 100 ms of kernel plus two 1 MiB copies at 25 GB/s (about 44 us each).
  CLIENT_RANGE(c, elapsed_ms(before, after), 100.0, 100.5);
}

void cross_stream_client(ClientLink& c) {
  CUfunction spin = nullptr;
  if (!open_device(c) || !load_kernel(c, "spin", &spin)) return;
  CUdeviceptr a = 0;
  void* waited = nullptr;
  void* unwaited = nullptr;
  CUstream producer = nullptr, consumer = nullptr, bystander = nullptr;
  CUevent produced = nullptr;
  if (!CLIENT_OK(c, cuMemAlloc(&a, kCopyBytes)) || !CLIENT_OK(c, cuMemAllocHost(&waited, kCopyBytes)) ||
      !CLIENT_OK(c, cuMemAllocHost(&unwaited, kCopyBytes)) ||
      !CLIENT_OK(c, cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING)) ||
      !CLIENT_OK(c, cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING)) ||
      !CLIENT_OK(c, cuStreamCreate(&bystander, CU_STREAM_NON_BLOCKING)) ||
      !CLIENT_OK(c, cuEventCreate(&produced, CU_EVENT_DISABLE_TIMING))) {
    return;
  }
  constexpr std::size_t kWords = kCopyBytes / 4;
  CLIENT_OK(c, cuMemsetD32(a, 0x11111111, kWords));
  // The producer overwrites `a` only after a 100 ms kernel.
  CLIENT_OK(c, launch_spin(spin, 100'000, 1, producer));
  CLIENT_OK(c, cuMemsetD32Async(a, 0x22222222, kWords, producer));
  CLIENT_OK(c, cuEventRecord(produced, producer));
  // The consumer waits for the event and sees the new data; a stream that does not wait reads
  // the old data meanwhile.
  CLIENT_OK(c, cuStreamWaitEvent(consumer, produced, 0));
  CLIENT_OK(c, cuMemcpyDtoHAsync(waited, a, kCopyBytes, consumer));
  CLIENT_OK(c, cuMemcpyDtoHAsync(unwaited, a, kCopyBytes, bystander));
  CLIENT_OK(c, cuStreamSynchronize(bystander));
  CLIENT_CU(c, cuEventQuery(produced), CUDA_ERROR_NOT_READY);
  CLIENT_CHECK(c, all_equal<std::uint32_t>(unwaited, kWords, 0x11111111u));
  CLIENT_OK(c, cuStreamSynchronize(consumer));
  CLIENT_OK(c, cuEventQuery(produced));
  CLIENT_CHECK(c, all_equal<std::uint32_t>(waited, kWords, 0x22222222u));
}

void graph_client(ClientLink& c) {
  CUfunction spin = nullptr;
  if (!open_device(c) || !load_kernel(c, "spin", &spin)) return;
  CUdeviceptr a = 0, b = 0;
  void* host_src = nullptr;
  void* host_dst = nullptr;
  CUstream stream = nullptr;
  if (!CLIENT_OK(c, cuMemAlloc(&a, kCopyBytes)) || !CLIENT_OK(c, cuMemAlloc(&b, kCopyBytes)) ||
      !CLIENT_OK(c, cuMemAllocHost(&host_src, kCopyBytes)) || !CLIENT_OK(c, cuMemAllocHost(&host_dst, kCopyBytes)) ||
      !CLIENT_OK(c, cuStreamCreate(&stream, 0))) {
    return;
  }
  CLIENT_OK(c, cuMemsetD8(b, 0, kCopyBytes));
  std::memset(host_dst, 0, kCopyBytes);
  // Capture: copy in, memset, kernel, copy out. Nothing runs while capturing.
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  // A thread's capture mode starts global and is swapped, as CUDA libraries do around unsafe calls.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CLIENT_OK(c, cuThreadExchangeStreamCaptureMode(&mode));
  CLIENT_CHECK(c, mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
  CLIENT_OK(c, cuThreadExchangeStreamCaptureMode(&mode));
  CLIENT_CHECK(c, mode == CU_STREAM_CAPTURE_MODE_RELAXED);
  mode = static_cast<CUstreamCaptureMode>(7);
  CLIENT_CU(c, cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);
  CLIENT_CU(c, cuThreadExchangeStreamCaptureMode(nullptr), CUDA_ERROR_INVALID_VALUE);
  CLIENT_OK(c, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CLIENT_OK(c, cuStreamIsCapturing(stream, &status));
  CLIENT_CHECK(c, status == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CLIENT_OK(c, cuMemcpyHtoDAsync(a, host_src, kCopyBytes, stream));
  CLIENT_OK(c, cuMemsetD8Async(b, 0x77, kCopyBytes, stream));
  CLIENT_OK(c, launch_spin(spin, 20'000, 1, stream));
  CLIENT_OK(c, cuMemcpyDtoHAsync(host_dst, a, kCopyBytes, stream));
  CLIENT_OK(c, cuStreamEndCapture(stream, &graph));
  CLIENT_OK(c, cuStreamIsCapturing(stream, &status));
  CLIENT_CHECK(c, status == CU_STREAM_CAPTURE_STATUS_NONE);
  if (!CLIENT_OK(c, cuGraphInstantiate(&exec, graph, 0))) return;
  CLIENT_OK(c, cuStreamSynchronize(stream));
  std::vector<std::uint8_t> b_back(kCopyBytes, 1);
  CLIENT_OK(c, cuMemcpyDtoH(b_back.data(), b, kCopyBytes));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(b_back.data(), kCopyBytes, 0));    // memset not run
  CLIENT_CHECK(c, all_equal<std::uint8_t>(host_dst, kCopyBytes, 0));         // copies not run

  // Two replays; each reads the host buffer as it is when the graph runs.
  CUevent before = nullptr, after = nullptr;
  CLIENT_OK(c, cuEventCreate(&before, 0));
  CLIENT_OK(c, cuEventCreate(&after, 0));
  for (unsigned replay = 0; replay < 2; ++replay) {
    auto source = pattern(kCopyBytes, 10 + replay);
    std::memcpy(host_src, source.data(), kCopyBytes);
    CLIENT_OK(c, cuMemsetD8(b, 0, kCopyBytes));
    StreamGate gate;
    CLIENT_OK(c, gate.close(stream));
    CLIENT_OK(c, cuEventRecord(before, stream));
    CLIENT_OK(c, cuGraphLaunch(exec, stream));
    CLIENT_OK(c, cuEventRecord(after, stream));
    gate.open();
    CLIENT_OK(c, cuStreamSynchronize(stream));
    CLIENT_CHECK(c, equal_bytes(host_dst, source.data(), kCopyBytes));
    CLIENT_OK(c, cuMemcpyDtoH(b_back.data(), b, kCopyBytes));
    CLIENT_CHECK(c, all_equal<std::uint8_t>(b_back.data(), kCopyBytes, 0x77));
    CLIENT_RANGE(c, elapsed_ms(before, after), 20.0, 20.5);  // the kernel and three short transfers
  }
  CLIENT_OK(c, cuGraphExecDestroy(exec));
  CLIENT_OK(c, cuGraphDestroy(graph));
}

TEST_F(DriverItest, SyncCopiesAndMemsetsRoundTripBytes) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), sync_copies_client);
  expect_clean(client.finish(), "client");
  EXPECT_GT(server().device_stat("copies_completed"), 8);
}

TEST_F(DriverItest, TwoDimensionalCopiesMoveTheirWindowOnly) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), copies_2d_client);
  expect_clean(client.finish(), "client");
  EXPECT_EQ(server().device_stat("copies_completed"), 8) << "the memset and the seven good copies: no bad one reached the device";
}

TEST_F(DriverItest, ThreeDimensionalCopiesMoveTheirBoxOnly) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), copies_3d_client);
  expect_clean(client.finish(), "client");
  EXPECT_EQ(server().device_stat("copies_completed"), 9)
      << "the memset, the seven good 3D copies and one DtoH: no bad one reached the device";
}

// Stream-ordered allocation: memory from cuMemAllocAsync holds data copied in and out on its
// stream, counts in the device's memory until cuMemFreeAsync, and is refused in a capture; a free
// of memory that is not an allocation is refused.
TEST_F(DriverItest, StreamOrderedAllocationsHoldDataUntilFreedAsync) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    if (!open_device(c)) return;
    CUstream stream = nullptr;
    if (!CLIENT_OK(c, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING))) return;
    std::size_t free_before = 0, free_after = 0, total = 0;
    CLIENT_OK(c, cuMemGetInfo(&free_before, &total));
    CUdeviceptr p = 0;
    if (!CLIENT_OK(c, cuMemAllocAsync(&p, kMiB, stream))) return;
    CLIENT_OK(c, cuMemGetInfo(&free_after, &total));
    CLIENT_CHECK(c, free_before - free_after == kMiB);
    const auto source = pattern(kMiB, 9);
    std::vector<std::uint8_t> back(kMiB, 0);
    CLIENT_OK(c, cuMemcpyHtoDAsync(p, source.data(), kMiB, stream));
    CLIENT_OK(c, cuMemcpyDtoHAsync(back.data(), p, kMiB, stream));
    CLIENT_OK(c, cuMemFreeAsync(p, stream));
    CLIENT_OK(c, cuStreamSynchronize(stream));
    CLIENT_CHECK(c, back == source);
    CLIENT_OK(c, cuMemGetInfo(&free_after, &total));
    CLIENT_CHECK(c, free_after == free_before);
    CLIENT_CU(c, cuMemFreeAsync(p, stream), CUDA_ERROR_INVALID_VALUE);  // freed already
    CLIENT_CU(c, cuMemFreeAsync(0, stream), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuMemAllocAsync(nullptr, kMiB, stream), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuMemAllocAsync(&p, 0, stream), CUDA_ERROR_INVALID_VALUE);
    CLIENT_OK(c, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CLIENT_CU(c, cuMemAllocAsync(&p, kMiB, stream), CUDA_ERROR_NOT_SUPPORTED);
    CUgraph graph = nullptr;
    CLIENT_OK(c, cuStreamEndCapture(stream, &graph));
    if (graph) CLIENT_OK(c, cuGraphDestroy(graph));
  });
  expect_clean(client.finish(), "client");
  EXPECT_EQ(server().device_stat("memory_used_bytes"), 0);
  EXPECT_EQ(server().device_stat("copies_completed"), 2);
}

TEST_F(DriverItest, AsyncCopiesPinnedAndPageableRoundTripBytesInStreamOrder) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), async_copies_client);
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, StreamWaitEventOrdersDataAcrossStreams) {
  start(profile("timeslice"));
  ClientProcess client(server().socket(), cross_stream_client);
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, CapturedGraphOfCopyMemsetKernelReplaysTwice) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), graph_client);
  expect_clean(client.finish(), "client");
  EXPECT_EQ(server().device_stat("kernels_completed"), 2);  // the captured kernel, once per replay
}

// The legacy stream is unusable while a blocking stream of its context captures, as with the real
// driver (cuStreamIsCapturing in cuda.h): querying it fails and invalidates the capture, and asking
// whether it captures only says so. A non-blocking stream's capture leaves it usable. The shim must
// not break a program's capture by asking whether the legacy stream is idle (intercept.h).
TEST_F(DriverItest, UsingTheLegacyStreamWhileABlockingStreamCapturesInvalidatesTheCapture) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr;
    if (!open_device(c) || !load_kernel(c, "spin", &spin)) return;
    CUstream blocking = nullptr, non_blocking = nullptr;
    if (!CLIENT_OK(c, cuStreamCreate(&blocking, 0)) || !CLIENT_OK(c, cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING))) {
      return;
    }
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph graph = nullptr;
    CLIENT_OK(c, cuStreamBeginCapture(non_blocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CLIENT_OK(c, cuStreamIsCapturing(CU_STREAM_LEGACY, &status));
    CLIENT_CHECK(c, status == CU_STREAM_CAPTURE_STATUS_NONE);
    CLIENT_OK(c, cuStreamQuery(CU_STREAM_LEGACY));
    CLIENT_OK(c, cuStreamEndCapture(non_blocking, &graph));
    CLIENT_OK(c, cuGraphDestroy(graph));

    CLIENT_OK(c, cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
    CLIENT_OK(c, launch_spin(spin, 10, 1, blocking));
    CLIENT_CU(c, cuStreamIsCapturing(CU_STREAM_LEGACY, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CLIENT_OK(c, cuStreamIsCapturing(blocking, &status));
    CLIENT_CHECK(c, status == CU_STREAM_CAPTURE_STATUS_ACTIVE);  // asking did not invalidate it
    CLIENT_CU(c, cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CLIENT_OK(c, cuStreamIsCapturing(blocking, &status));
    CLIENT_CHECK(c, status == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CLIENT_CU(c, launch_spin(spin, 10, 1, blocking), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    graph = reinterpret_cast<CUgraph>(&status);
    CLIENT_CU(c, cuStreamEndCapture(blocking, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CLIENT_CHECK(c, graph == nullptr);
    CLIENT_OK(c, cuStreamQuery(CU_STREAM_LEGACY));  // usable again
    CLIENT_OK(c, cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CLIENT_OK(c, cuStreamEndCapture(blocking, &graph));
    CLIENT_OK(c, cuGraphDestroy(graph));
  });
  expect_clean(client.finish(), "client");
}

// ---------------------------------------------------------------------------------------------
// 3. Error codes.

TEST_F(DriverItest, CallsBeforeCuInitReturnNotInitialized) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    int count = -1;
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    CUdeviceptr p = 0;
    CLIENT_CU(c, cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    CLIENT_CU(c, cuDeviceGet(&device, 0), CUDA_ERROR_NOT_INITIALIZED);
    CLIENT_CU(c, cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
    CLIENT_CU(c, cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
    CLIENT_CU(c, cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    CLIENT_CU(c, cuStreamSynchronize(nullptr), CUDA_ERROR_NOT_INITIALIZED);
    // These need no initialisation.
    int version = 0;
    CLIENT_OK(c, cuDriverGetVersion(&version));
    CLIENT_CHECK(c, version >= 12000);
    const char* name = nullptr;
    CLIENT_OK(c, cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name));
    // And cuInit still works afterwards.
    CLIENT_OK(c, cuInit(0));
    CLIENT_OK(c, cuDeviceGetCount(&count));
    CLIENT_CHECK(c, count == 1);
  });
  expect_clean(client.finish(), "client");
}

// A child forked after the parent initialised CUDA cannot use it, as with the real driver: every call
// says so at once. A user test: the child's cuMemAlloc waited for ever for a reply that went to the
// parent's connection, and the parent waited for the child.
TEST_F(DriverItest, AChildForkedAfterCuInitGetsNotInitializedAndTheParentGoesOn) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    if (!open_device(c)) return;
    CUdeviceptr p = 0;
    CLIENT_OK(c, cuMemAlloc(&p, 1024));
    const pid_t child = ::fork();
    if (child == 0) {
      CUdeviceptr q = 0;
      int failed = 0;
      failed += cuMemAlloc(&q, 1024) != CUDA_ERROR_NOT_INITIALIZED;
      failed += cuCtxSynchronize() != CUDA_ERROR_NOT_INITIALIZED;
      failed += cuInit(0) != CUDA_ERROR_NOT_INITIALIZED;
      ::_exit(failed);
    }
    int status = -1;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (::waitpid(child, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    const bool exited = WIFEXITED(status);
    if (!exited) ::kill(child, SIGKILL), ::waitpid(child, &status, 0);
    CLIENT_CHECK(c, exited && WEXITSTATUS(status) == 0);
    CUdeviceptr r = 0;
    CLIENT_OK(c, cuMemAlloc(&r, 1024));  // the parent's connection is untouched
    CLIENT_OK(c, cuMemcpyHtoD(r, &status, sizeof status));
    CLIENT_OK(c, cuCtxSynchronize());
  });
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, BadHandlesSizesNamesAndImagesReturnTheirErrorCodes) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr;
    if (!open_device(c) || !load_kernel(c, "spin", &spin)) return;
    auto* garbage_stream = reinterpret_cast<CUstream>(0x5eed0);
    auto* garbage_event = reinterpret_cast<CUevent>(0x5eed0);
    auto* garbage_function = reinterpret_cast<CUfunction>(0x5eed0);
    auto* garbage_module = reinterpret_cast<CUmodule>(0x5eed0);
    CLIENT_CU(c, cuStreamSynchronize(garbage_stream), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, cuStreamQuery(garbage_stream), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, launch_spin(spin, 10, 1, garbage_stream), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, cuEventRecord(garbage_event, nullptr), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, cuEventQuery(garbage_event), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, cuEventSynchronize(garbage_event), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, launch_spin(garbage_function, 10, 1, nullptr), CUDA_ERROR_INVALID_HANDLE);
    CUfunction found = nullptr;
    CLIENT_CU(c, cuModuleGetFunction(&found, garbage_module, "spin"), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, cuModuleUnload(garbage_module), CUDA_ERROR_INVALID_HANDLE);

    // A destroyed stream is a bad handle too; so is a destroyed event.
    CUstream stream = nullptr;
    CUevent event = nullptr;
    CLIENT_OK(c, cuStreamCreate(&stream, 0));
    CLIENT_OK(c, cuStreamDestroy(stream));
    CLIENT_CU(c, cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, launch_spin(spin, 10, 1, stream), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, cuStreamDestroy(stream), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_OK(c, cuEventCreate(&event, 0));
    CLIENT_OK(c, cuEventDestroy(event));
    CLIENT_CU(c, cuEventRecord(event, nullptr), CUDA_ERROR_INVALID_HANDLE);
    // An event never recorded has no time.
    CUevent unrecorded = nullptr, recorded = nullptr;
    CLIENT_OK(c, cuEventCreate(&unrecorded, 0));
    CLIENT_OK(c, cuEventCreate(&recorded, 0));
    CLIENT_OK(c, cuEventRecord(recorded, nullptr));
    CLIENT_OK(c, cuEventSynchronize(recorded));
    float ms = 0;
    CLIENT_CU(c, cuEventElapsedTime(&ms, unrecorded, recorded), CUDA_ERROR_INVALID_HANDLE);

    // Sizes: zero-byte allocations, copies and memsets past an allocation's end, bad frees.
    CUdeviceptr p = 0;
    CLIENT_CU(c, cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
    if (!CLIENT_OK(c, cuMemAlloc(&p, 4096))) return;
    std::vector<std::uint8_t> host(8192, 0);
    CLIENT_CU(c, cuMemcpyHtoD(p, host.data(), 4097), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuMemcpyHtoD(p + 4000, host.data(), 97), CUDA_ERROR_INVALID_VALUE);
    CLIENT_OK(c, cuMemcpyHtoD(p + 4000, host.data(), 96));
    CLIENT_CU(c, cuMemcpyDtoH(host.data(), p + 1, 4096), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuMemsetD32(p, 0, 1025), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuMemsetD8Async(p + 4096, 0, 1, nullptr), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuMemFree(p + 8), CUDA_ERROR_INVALID_VALUE);
    CLIENT_OK(c, cuMemFree(p));
    CLIENT_CU(c, cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuMemcpyHtoD(p, host.data(), 16), CUDA_ERROR_INVALID_VALUE);  // freed memory

    // Launch shapes, names and images.
    std::uint64_t us = 10;
    void* params[] = {&us};
    CLIENT_CU(c, cuLaunchKernel(spin, 0, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CU(c, cuLaunchKernel(spin, 1, 1, 1, 1025, 1, 1, 0, nullptr, params, nullptr), CUDA_ERROR_INVALID_VALUE);
    CUmodule module = nullptr;
    CLIENT_OK(c, cuModuleLoadData(&module, kPtx));
    CLIENT_CU(c, cuModuleGetFunction(&found, module, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    CLIENT_CU(c, cuModuleGetFunction(&found, module, "spi"), CUDA_ERROR_NOT_FOUND);
    CUmodule bad = nullptr;
    CLIENT_CU(c, cuModuleLoadData(&bad, "this is not PTX, a cubin or a fatbinary"), CUDA_ERROR_INVALID_IMAGE);
    CLIENT_CU(c, cuModuleLoadData(&bad, ".target sm_70\n.visible .entry k() { ret; }\n"), CUDA_ERROR_INVALID_IMAGE);
    // Unloading a module makes its functions bad handles.
    CLIENT_OK(c, cuModuleGetFunction(&found, module, "spin"));
    CLIENT_OK(c, cuModuleUnload(module));
    CLIENT_CU(c, launch_spin(found, 10, 1, nullptr), CUDA_ERROR_INVALID_HANDLE);
    CLIENT_CU(c, cuModuleGetFunction(&found, module, "spin"), CUDA_ERROR_INVALID_HANDLE);

    // No context current: context-bound calls say so.
    CLIENT_OK(c, cuCtxSetCurrent(nullptr));
    CLIENT_CU(c, cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CLIENT_CU(c, cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
  });
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, AllocationsBeyondDeviceCapacityAcrossProcessesAreOutOfMemory) {
  start(profile("fifo", "memory_gib = 1.0"));
  // The holder takes 768 MiB of the 1 GiB and keeps it until told to let go.
  ClientProcess holder(server().socket(), [](ClientLink& c) {
    CUdeviceptr p = 0;
    if (!open_device(c) || !CLIENT_OK(c, cuMemAlloc(&p, 768 * kMiB))) return;
    c.ready();
    c.wait_go();
    CLIENT_OK(c, cuMemFree(p));
    c.report("freed", 1);
    c.wait_go();
  });
  ASSERT_TRUE(holder.wait_ready());
  EXPECT_EQ(server().device_stat("memory_used_bytes"), static_cast<std::int64_t>(768 * kMiB));
  ClientProcess other(server().socket(), [](ClientLink& c) {
    CUdeviceptr big = 0, small = 0;
    if (!open_device(c)) return;
    std::size_t free_bytes = 0, total_bytes = 0;
    CLIENT_OK(c, cuMemGetInfo(&free_bytes, &total_bytes));
    CLIENT_CHECK(c, total_bytes == 1024 * kMiB);
    CLIENT_CHECK(c, free_bytes == 256 * kMiB);
    CLIENT_CU(c, cuMemAlloc(&big, 512 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);
    CLIENT_OK(c, cuMemAlloc(&small, 200 * kMiB));
    CLIENT_CU(c, cuMemAlloc(&big, 57 * kMiB), CUDA_ERROR_OUT_OF_MEMORY);  // 56 MiB left
    c.ready();
    c.wait_go();  // the holder has freed its 768 MiB
    CLIENT_OK(c, cuMemAlloc(&big, 512 * kMiB));
    CLIENT_OK(c, cuMemGetInfo(&free_bytes, &total_bytes));
    CLIENT_CHECK(c, free_bytes == (1024 - 712) * kMiB);
    CLIENT_OK(c, cuMemFree(big));
    CLIENT_OK(c, cuMemFree(small));
  });
  ASSERT_TRUE(other.wait_ready());
  holder.go();
  ASSERT_FALSE(holder.wait_value("freed").empty());
  other.go();
  expect_clean(other.finish(), "other");
  holder.go();
  expect_clean(holder.finish(), "holder");
  EXPECT_EQ(server().device_stat("memory_used_bytes"), 0);
}

TEST_F(DriverItest, ErrorNamesAndStrings) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    const char* text = nullptr;
    CLIENT_OK(c, cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text));
    CLIENT_CHECK(c, text && std::string(text) == "CUDA_ERROR_OUT_OF_MEMORY");
    CLIENT_OK(c, cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &text));
    CLIENT_CHECK(c, text && std::string(text) == "out of memory");
    CLIENT_OK(c, cuGetErrorName(CUDA_SUCCESS, &text));
    CLIENT_CHECK(c, text && std::string(text) == "CUDA_SUCCESS");
    CLIENT_OK(c, cuGetErrorString(CUDA_ERROR_INVALID_HANDLE, &text));
    CLIENT_CHECK(c, text && std::string(text) == "invalid resource handle");
    CLIENT_OK(c, cuGetErrorName(CUDA_ERROR_NOT_FOUND, &text));
    CLIENT_CHECK(c, text && std::string(text) == "CUDA_ERROR_NOT_FOUND");
    text = "unchanged";
    CLIENT_CU(c, cuGetErrorName(static_cast<CUresult>(123456), &text), CUDA_ERROR_INVALID_VALUE);
    CLIENT_CHECK(c, text == nullptr);
    CLIENT_CU(c, cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, nullptr), CUDA_ERROR_INVALID_VALUE);
  });
  expect_clean(client.finish(), "client");
}

// ---------------------------------------------------------------------------------------------
// 4. A client killed mid-kernel is reclaimed: the device moves on and its memory is freed.

TEST_F(DriverItest, KilledClientIsReclaimedAndUnblocksTheQueue) {
  start(profile("fifo", "memory_gib = 1.0"));
  ClientProcess victim(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr;
    CUdeviceptr p = 0;
    if (!open_device(c) || !load_kernel(c, "spin", &spin) || !CLIENT_OK(c, cuMemAlloc(&p, 256 * kMiB))) return;
    CLIENT_OK(c, launch_spin(spin, 2'000'000, 8, nullptr));  // 2 s
    c.ready();
    c.wait_go();  // never comes: SIGKILL does
  });
  ASSERT_TRUE(victim.wait_ready());
  ClientProcess waiter(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr;
    CUdeviceptr p = 0;
    CUevent start = nullptr, end = nullptr;
    if (!open_device(c) || !load_kernel(c, "spin", &spin) || !CLIENT_OK(c, cuMemAlloc(&p, 64 * kMiB)) ||
        !CLIENT_OK(c, cuEventCreate(&start, 0)) || !CLIENT_OK(c, cuEventCreate(&end, 0))) {
      return;
    }
    c.ready();
    c.wait_go();
    CLIENT_OK(c, cuEventRecord(start, nullptr));
    CLIENT_OK(c, launch_spin(spin, 50'000, 8, nullptr));  // queued behind the 2 s kernel
    CLIENT_OK(c, cuEventRecord(end, nullptr));
    c.report("launched_ms", now_ms());
    CLIENT_OK(c, cuEventSynchronize(end));
    c.report("end_ms", now_ms());
    c.report("event_ms", elapsed_ms(start, end));
    c.wait_go();  // keeps its 64 MiB until told to exit
  });
  ASSERT_TRUE(waiter.wait_ready());
  EXPECT_EQ(server().device_stat("memory_used_bytes"), static_cast<std::int64_t>(320 * kMiB));
  waiter.go();
  ASSERT_FALSE(waiter.wait_value("launched_ms").empty());
  std::this_thread::sleep_for(150ms);
  EXPECT_TRUE(waiter.wait_value("end_ms", 0ms).empty()) << "the waiter's kernel did not wait for the 2 s one";
  double kill_ms = now_ms();
  victim.kill_now();

  ASSERT_FALSE(waiter.wait_value("event_ms", 5s).empty());
  const ClientOutcome& waited = waiter.outcome();  // the waiter still runs, holding its memory
  // It waited for the kill (>= 150 ms), then ran its 50 ms: far less than the 2 s it queued behind.
  double event_ms = waited.number("event_ms");
  EXPECT_GE(event_ms, 150 + 50 - 20.0);  // margin: simgpud may be slow to see the launch on a loaded machine
  EXPECT_LT(event_ms, 1000);
  EXPECT_GE(waited.number("end_ms") - kill_ms, 50 - 1.0);
  EXPECT_LT(waited.number("end_ms") - kill_ms, 500);
  // The victim's 256 MiB is back; the waiter still holds its 64 MiB.
  EXPECT_EQ(server().device_stat("memory_used_bytes"), static_cast<std::int64_t>(64 * kMiB));
  EXPECT_EQ(server().device_stat("kernels_completed"), 1);  // the killed kernel never completed
  waiter.go();
  expect_clean(waiter.finish(), "waiter");
  // A client that exits without freeing is reclaimed as well.
  std::int64_t used = -1;
  for (int i = 0; i < 200 && (used = server().device_stat("memory_used_bytes")) != 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(used, 0);
}

// ---------------------------------------------------------------------------------------------
// 5. No server: cuInit says there is no device, promptly.

TEST_F(DriverItest, CuInitWithoutServerReturnsNoDevicePromptly) {
  start(profile("fifo"));  // only for its temp dir
  fs::path dir = server().dir();
  // A socket file nobody listens on (bound, never listen()ed): connect is refused.
  std::string refusing = (dir / "refusing.sock").string();
  int bound = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, refusing.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(bound, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  for (const std::string& path : {(dir / "nobody.sock").string(), refusing}) {
    ClientProcess client(path, [](ClientLink& c) {
      double start_ms = now_ms();
      CLIENT_CU(c, cuInit(0), CUDA_ERROR_NO_DEVICE);
      c.report("init_ms", now_ms() - start_ms);
      int count = -1;
      CLIENT_CHECK(c, cuDeviceGetCount(&count) != CUDA_SUCCESS);
    });
    ClientOutcome outcome = client.finish(10s);
    expect_clean(outcome, path);
    EXPECT_LT(outcome.number("init_ms"), 1000) << path;
  }
  ::close(bound);
}

TEST_F(DriverItest, CuInitAgainstASilentServerGivesUp) {
  start(profile("fifo"));  // only for its temp dir
  // A socket that accepts connections into its backlog but never answers the hello.
  std::string silent = (server().dir() / "silent.sock").string();
  int listening = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, silent.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(listening, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listening, 4), 0);
  ClientProcess client(silent, [](ClientLink& c) {
    double start_ms = now_ms();
    CLIENT_CU(c, cuInit(0), CUDA_ERROR_NO_DEVICE);
    c.report("init_ms", now_ms() - start_ms);
  });
  ClientOutcome outcome = client.finish(20s);
  expect_clean(outcome, "client");
  EXPECT_LT(outcome.number("init_ms"), 15000);
  ::close(listening);
}

// ---------------------------------------------------------------------------------------------
// 6. Devices, contexts, entry points, stream semantics, host functions, launch variants.

constexpr const char* kTwoDeviceProfile = R"(
compute_mode = "timeslice"
sms = 100
memory_gib = 2.0
cc_major = 8
cc_minor = 6
[[device]]
name = "itest gpu zero"
[[device]]
name = "itest gpu one"
sms = 50
)";

std::string hex(const CUuuid& uuid) {
  std::string text;
  char byte[3];
  for (char b : uuid.bytes) {
    std::snprintf(byte, sizeof byte, "%02x", static_cast<unsigned char>(b));
    text += byte;
  }
  return text;
}

void device_query_client(ClientLink& c) {
  if (!CLIENT_OK(c, cuInit(0))) return;
  int count = 0;
  CLIENT_OK(c, cuDeviceGetCount(&count));
  CLIENT_CHECK(c, count == 2);
  const char* names[] = {"itest gpu zero", "itest gpu one"};
  const int sms[] = {100, 50};
  for (int ordinal = 0; ordinal < 2; ++ordinal) {
    CUdevice dev = -1;
    CLIENT_OK(c, cuDeviceGet(&dev, ordinal));
    char name[128] = {};
    CLIENT_OK(c, cuDeviceGetName(name, sizeof name, dev));
    CLIENT_CHECK(c, std::string(name) == names[ordinal]);
    char short_name[6] = {};
    CLIENT_OK(c, cuDeviceGetName(short_name, sizeof short_name, dev));
    CLIENT_CHECK(c, std::string(short_name) == "itest");  // truncated, NUL-terminated
    int value = 0, major = 0, minor = 0;
    CLIENT_OK(c, cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CLIENT_CHECK(c, value == sms[ordinal]);
    CLIENT_OK(c, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CLIENT_OK(c, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CLIENT_CHECK(c, major == 8 && minor == 6);
    std::size_t total = 0;
    CLIENT_OK(c, cuDeviceTotalMem(&total, dev));
    CLIENT_CHECK(c, total == 2048 * kMiB);
    CUuuid uuid{}, again{};
    CLIENT_OK(c, cuDeviceGetUuid(&uuid, dev));
    CLIENT_OK(c, cuDeviceGetUuid(&again, dev));
    CLIENT_CHECK(c, hex(uuid) == hex(again));
    c.report("uuid" + std::to_string(ordinal), hex(uuid));
  }
  CUdevice dev = -1;
  char name[32];
  CLIENT_CU(c, cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  CLIENT_CU(c, cuDeviceGetName(name, sizeof name, 2), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(DriverItest, DevicesReportTheProfileAndStableUuids) {
  start(kTwoDeviceProfile);
  ClientProcess first(server().socket(), device_query_client);
  ClientProcess second(server().socket(), device_query_client);
  ClientOutcome a = first.finish(), b = second.finish();
  expect_clean(a, "first");
  expect_clean(b, "second");
  EXPECT_EQ(a.values["uuid0"].size(), 32u);
  EXPECT_NE(a.values["uuid0"], a.values["uuid1"]);
  EXPECT_EQ(a.values["uuid0"], b.values["uuid0"]);
  EXPECT_EQ(a.values["uuid1"], b.values["uuid1"]);
  // A restarted server with the same profile presents the same devices.
  server().kill();
  server().start();
  ClientProcess third(server().socket(), device_query_client);
  ClientOutcome c = third.finish();
  expect_clean(c, "after restart");
  EXPECT_EQ(a.values["uuid0"], c.values["uuid0"]);
  EXPECT_EQ(a.values["uuid1"], c.values["uuid1"]);
}

// Reports device `ordinal`'s UUID and PCI bus id as "uuid<ordinal>" and "bus<ordinal>".
void report_identity(ClientLink& c, int ordinal) {
  CUuuid uuid{};
  CLIENT_OK(c, cuDeviceGetUuid(&uuid, ordinal));
  c.report("uuid" + std::to_string(ordinal), hex(uuid));
  char bus[32] = {};
  CLIENT_OK(c, cuDeviceGetPCIBusId(bus, sizeof bus, ordinal));
  c.report("bus" + std::to_string(ordinal), bus);
}

// From the pool of the stream's device, whichever context is current; and a stream of another
// device's context is enough, with no context current.
TEST_F(DriverItest, AStreamOrderedAllocationIsOnItsStreamsDevice) {
  start(kTwoDeviceProfile);
  ClientProcess client(server().socket(), [](ClientLink& c) {
    if (!CLIENT_OK(c, cuInit(0))) return;
    CUcontext zero = nullptr, one = nullptr;
    CUstream on_one = nullptr;
    if (!CLIENT_OK(c, cuCtxCreate(&zero, nullptr, 0, 0)) || !CLIENT_OK(c, cuCtxCreate(&one, nullptr, 0, 1)) ||
        !CLIENT_OK(c, cuStreamCreate(&on_one, CU_STREAM_NON_BLOCKING)) || !CLIENT_OK(c, cuCtxPopCurrent(&one))) {
      return;
    }
    CUdeviceptr p = 0, q = 0;
    if (!CLIENT_OK(c, cuMemAllocAsync(&p, 32 * kMiB, on_one))) return;  // device 0's context is current
    CUcontext none = nullptr;
    CLIENT_OK(c, cuCtxPopCurrent(&none));
    CLIENT_OK(c, cuMemAllocAsync(&q, 16 * kMiB, on_one));  // none is
    CLIENT_CU(c, cuMemAllocAsync(&q, kMiB, nullptr), CUDA_ERROR_INVALID_CONTEXT);
    c.ready();
    c.wait_go();
    CLIENT_OK(c, cuMemFreeAsync(p, on_one));
    CLIENT_OK(c, cuMemFreeAsync(q, on_one));
  });
  ASSERT_TRUE(client.wait_ready());
  EXPECT_EQ(server().device_stat("memory_used_bytes", 1), static_cast<std::int64_t>(48 * kMiB));
  EXPECT_EQ(server().device_stat("memory_used_bytes", 0), 0);
  client.go();
  expect_clean(client.finish(), "client");
  EXPECT_EQ(server().device_stat("memory_used_bytes", 1), 0);
}

// As the CUDA driver does, the process sees the devices CUDA_VISIBLE_DEVICES names, in its order:
// its ordinal 0 here is simgpud's device 1, and what it does there lands on that device.
TEST_F(DriverItest, CudaVisibleDevicesPicksAndOrdersTheDevicesAProcessSees) {
  start(kTwoDeviceProfile);
  ClientProcess plain(server().socket(), [](ClientLink& c) {
    if (CLIENT_OK(c, cuInit(0))) report_identity(c, 1);
  });
  ClientOutcome node = plain.finish();
  expect_clean(node, "without the variable");
  ClientProcess swapped(server().socket(), [](ClientLink& c) {
    ::setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
    if (!CLIENT_OK(c, cuInit(0))) return;
    int count = 0;
    CLIENT_OK(c, cuDeviceGetCount(&count));
    CLIENT_CHECK(c, count == 2);
    char name[64] = {};
    CLIENT_OK(c, cuDeviceGetName(name, sizeof name, 0));
    CLIENT_CHECK(c, std::string(name) == "itest gpu one");
    int sms = 0;
    CLIENT_OK(c, cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    CLIENT_CHECK(c, sms == 50);
    report_identity(c, 0);
    CUdeviceptr p = 0;
    if (!open_device(c, 0) || !CLIENT_OK(c, cuMemAlloc(&p, 64 * kMiB))) return;
    c.ready();
    c.wait_go();
  });
  ASSERT_TRUE(swapped.wait_ready());
  EXPECT_EQ(server().device_stat("memory_used_bytes", 1), static_cast<std::int64_t>(64 * kMiB));
  EXPECT_EQ(server().device_stat("memory_used_bytes", 0), 0);
  swapped.go();
  ClientOutcome seen = swapped.finish();
  expect_clean(seen, "with CUDA_VISIBLE_DEVICES=1,0");
  EXPECT_EQ(seen.values["uuid0"], node.values["uuid1"]);
  EXPECT_EQ(seen.values["bus0"], node.values["bus1"]) << "the device's own bus id, not its ordinal's";
  // An entry that names no device ends the list; an empty one hides them all, as on a real node.
  ClientProcess one(server().socket(), [](ClientLink& c) {
    ::setenv("CUDA_VISIBLE_DEVICES", "1,-1,0", 1);
    int count = 0;
    CLIENT_OK(c, cuInit(0));
    CLIENT_OK(c, cuDeviceGetCount(&count));
    CLIENT_CHECK(c, count == 1);
    CUdevice dev = -1;
    CLIENT_CU(c, cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  });
  expect_clean(one.finish(), "with CUDA_VISIBLE_DEVICES=1,-1,0");
  ClientProcess none(server().socket(), [](ClientLink& c) {
    ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
    CLIENT_CU(c, cuInit(0), CUDA_ERROR_NO_DEVICE);
  });
  expect_clean(none.finish(), "with CUDA_VISIBLE_DEVICES empty");
}

TEST_F(DriverItest, PrimaryContextsAndTheContextStack) {
  start(kTwoDeviceProfile);
  ClientProcess client(server().socket(), [](ClientLink& c) {
    if (!CLIENT_OK(c, cuInit(0))) return;
    unsigned flags = 99;
    int active = 99;
    CLIENT_OK(c, cuDevicePrimaryCtxGetState(0, &flags, &active));
    CLIENT_CHECK(c, flags == 0 && active == 0);
    CLIENT_OK(c, cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
    CUcontext primary = nullptr, again = nullptr, current = nullptr;
    CLIENT_OK(c, cuDevicePrimaryCtxRetain(&primary, 0));
    CLIENT_OK(c, cuDevicePrimaryCtxGetState(0, &flags, &active));
    CLIENT_CHECK(c, flags == CU_CTX_SCHED_BLOCKING_SYNC && active == 1);
    CLIENT_OK(c, cuDevicePrimaryCtxRetain(&again, 0));
    CLIENT_CHECK(c, again == primary);
    CLIENT_OK(c, cuCtxGetCurrent(&current));
    CLIENT_CHECK(c, current == nullptr);  // retaining does not make it current
    unsigned long long first_id = 0, made_again_id = 0;
    CLIENT_CU(c, cuCtxGetId(nullptr, &first_id), CUDA_ERROR_INVALID_CONTEXT);  // none current
    CLIENT_OK(c, cuCtxGetId(primary, &first_id));
    CLIENT_OK(c, cuDevicePrimaryCtxRelease(0));
    CLIENT_OK(c, cuDevicePrimaryCtxGetState(0, &flags, &active));
    CLIENT_CHECK(c, active == 1);  // one reference left
    CLIENT_OK(c, cuDevicePrimaryCtxRelease(0));
    CLIENT_OK(c, cuDevicePrimaryCtxGetState(0, &flags, &active));
    CLIENT_CHECK(c, active == 0);
    CLIENT_CHECK(c, cuCtxSetCurrent(primary) != CUDA_SUCCESS);  // released for good
    // Made again, it is another context: an id of its own (a handle may come back, an id never).
    CLIENT_OK(c, cuDevicePrimaryCtxRetain(&again, 0));
    CLIENT_OK(c, cuCtxGetId(again, &made_again_id));
    CLIENT_CHECK(c, made_again_id != first_id);
    CLIENT_OK(c, cuDevicePrimaryCtxRelease(0));

    // Created contexts stack per thread.
    CUcontext zero = nullptr, one = nullptr, popped = nullptr;
    CUdevice device = -1;
    CLIENT_OK(c, cuCtxCreate(&zero, nullptr, 0, 0));
    CLIENT_OK(c, cuCtxCreate(&one, nullptr, 0, 1));  // pushed on top of `zero`
    CLIENT_OK(c, cuCtxGetCurrent(&current));
    CLIENT_CHECK(c, current == one);
    CLIENT_OK(c, cuCtxGetDevice(&device));
    CLIENT_CHECK(c, device == 1);
    CLIENT_OK(c, cuCtxPopCurrent(&popped));
    CLIENT_CHECK(c, popped == one);
    CLIENT_OK(c, cuCtxGetCurrent(&current));
    CLIENT_CHECK(c, current == zero);
    CLIENT_OK(c, cuCtxGetDevice(&device));
    CLIENT_CHECK(c, device == 0);
    CLIENT_OK(c, cuCtxPushCurrent(one));
    CLIENT_OK(c, cuCtxGetCurrent(&current));
    CLIENT_CHECK(c, current == one);
    CLIENT_OK(c, cuCtxPopCurrent(&popped));
    CLIENT_OK(c, cuCtxPopCurrent(&popped));
    CLIENT_CHECK(c, popped == zero);
    CLIENT_OK(c, cuCtxGetCurrent(&current));
    CLIENT_CHECK(c, current == nullptr);
    CLIENT_CU(c, cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
    // Work in a context that is not current elsewhere: memory of context `one` on device 1.
    CLIENT_OK(c, cuCtxPushCurrent(one));
    CUdeviceptr p = 0;
    CLIENT_OK(c, cuMemAlloc(&p, kMiB));
    CLIENT_OK(c, cuMemsetD8(p, 1, kMiB));
    CLIENT_OK(c, cuMemFree(p));
    CLIENT_OK(c, cuCtxDestroy(one));
    CLIENT_OK(c, cuCtxGetCurrent(&current));
    CLIENT_CHECK(c, current == nullptr);
    CLIENT_OK(c, cuCtxDestroy(zero));
    CLIENT_CU(c, cuCtxPushCurrent(zero), CUDA_ERROR_INVALID_CONTEXT);
    CLIENT_CU(c, cuCtxDestroy(zero), CUDA_ERROR_INVALID_CONTEXT);
  });
  expect_clean(client.finish(), "client");
}

// A green context: a context of its own that holds a reference to the primary one until destroyed.
TEST_F(DriverItest, AGreenContextHoldsThePrimaryContextUntilItIsDestroyed) {
  start(kTwoDeviceProfile);
  ClientProcess client(server().socket(), [](ClientLink& c) {
    if (!CLIENT_OK(c, cuInit(0))) return;
    CUdevResource sms{};
    CUdevResourceDesc desc = nullptr;
    CUgreenCtx green = nullptr;
    CUcontext context = nullptr, primary = nullptr;
    CUstream stream = nullptr;
    CLIENT_CU(c, cuDeviceGetDevResource(0, &sms, CU_DEV_RESOURCE_TYPE_INVALID), CUDA_ERROR_INVALID_RESOURCE_TYPE);
    CLIENT_OK(c, cuDeviceGetDevResource(0, &sms, CU_DEV_RESOURCE_TYPE_SM));
    CLIENT_CHECK(c, sms.type == CU_DEV_RESOURCE_TYPE_SM && sms.sm.smCount > 0);
    CLIENT_OK(c, cuDevResourceGenerateDesc(&desc, &sms, 1));
    CLIENT_CU(c, cuGreenCtxCreate(&green, desc, 0, 0), CUDA_ERROR_INVALID_VALUE);  // the default stream is required
    CLIENT_OK(c, cuGreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
    CLIENT_OK(c, cuCtxFromGreenCtx(&context, green));
    CLIENT_OK(c, cuDevicePrimaryCtxRetain(&primary, 0));
    CLIENT_CHECK(c, context != primary);
    CLIENT_OK(c, cuDevicePrimaryCtxRelease(0));
    unsigned flags = 0;
    int active = 0;
    CLIENT_OK(c, cuDevicePrimaryCtxGetState(0, &flags, &active));
    CLIENT_CHECK(c, active == 1);  // the green context's reference
    CLIENT_CU(c, cuGreenCtxStreamCreate(&stream, green, 0, 0), CUDA_ERROR_INVALID_VALUE);  // must be non-blocking
    CLIENT_OK(c, cuGreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, 0));
    CUcontext of_stream = nullptr;
    CLIENT_OK(c, cuStreamGetCtx(stream, &of_stream));
    CLIENT_CHECK(c, of_stream == context);
    CLIENT_OK(c, cuCtxSetCurrent(context));
    CLIENT_OK(c, cuStreamSynchronize(stream));
    CLIENT_OK(c, cuGreenCtxDestroy(green));
    CLIENT_OK(c, cuDevicePrimaryCtxGetState(0, &flags, &active));
    CLIENT_CHECK(c, active == 0);  // released with it
    CLIENT_CU(c, cuCtxFromGreenCtx(&context, green), CUDA_ERROR_INVALID_CONTEXT);
    CLIENT_CU(c, cuGreenCtxDestroy(green), CUDA_ERROR_INVALID_CONTEXT);
  });
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, GetProcAddressAnswersByVersionAndStreamFlavour) {
  start(profile("timeslice"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr;
    if (!open_device(c) || !load_kernel(c, "spin", &spin)) return;
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CLIENT_OK(c, cuGetProcAddress("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    CLIENT_CHECK(c, status == CU_GET_PROC_ADDRESS_SUCCESS);
    CLIENT_CHECK(c, fn == dlsym(RTLD_DEFAULT, "cuLaunchKernel") && fn != nullptr);
    void* per_thread = nullptr;
    CLIENT_OK(c, cuGetProcAddress("cuLaunchKernel", &per_thread, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                  &status));
    CLIENT_CHECK(c, status == CU_GET_PROC_ADDRESS_SUCCESS);
    CLIENT_CHECK(c, per_thread == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz") && per_thread != nullptr);
    // The _v2 ABI of cuMemAlloc is the one a CUDA 12 program gets.
    CLIENT_OK(c, cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    CLIENT_CHECK(c, fn == dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") && fn != nullptr);
    // Too old a version for the symbol, and no such symbol: success, a null pointer and a status
    // that says which (CUDA 12+ semantics, see cuda.h).
    fn = reinterpret_cast<void*>(0x1);
    CLIENT_OK(c, cuGetProcAddress("cuLaunchKernel", &fn, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    CLIENT_CHECK(c, status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CLIENT_CHECK(c, fn == nullptr);
    fn = reinterpret_cast<void*>(0x1);
    CLIENT_OK(c, cuGetProcAddress("cuNoSuchEntryPoint", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    CLIENT_CHECK(c, status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CLIENT_CHECK(c, fn == nullptr);

    // The per-thread flavour launches on the per-thread default stream, not the legacy one.
    using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
    auto launch_per_thread = reinterpret_cast<LaunchFn>(per_thread);
    std::uint64_t us = 200'000;
    void* params[] = {&us};
    if (!CLIENT_CHECK(c, launch_per_thread != nullptr)) return;
    CLIENT_OK(c, launch_per_thread(spin, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
    CLIENT_CU(c, cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
    CLIENT_OK(c, cuStreamSynchronize(CU_STREAM_PER_THREAD));
  });
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, LegacyStreamOrdersWithBlockingStreamsButNotNonBlockingOnes) {
  start(profile("timeslice"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr;
    CUdeviceptr p = 0;
    CUstream blocking = nullptr, non_blocking = nullptr;
    if (!open_device(c) || !load_kernel(c, "spin", &spin) || !CLIENT_OK(c, cuMemAlloc(&p, 4096)) ||
        !CLIENT_OK(c, cuStreamCreate(&blocking, CU_STREAM_DEFAULT)) ||
        !CLIENT_OK(c, cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING))) {
      return;
    }
    constexpr std::uint64_t kSpinUs = 300'000;
    unsigned flags = 99;
    CLIENT_OK(c, cuStreamGetFlags(non_blocking, &flags));
    CLIENT_CHECK(c, flags == CU_STREAM_NON_BLOCKING);

    // Blocking stream then legacy: the legacy memset waits for the kernel.
    double start = now_ms();
    CLIENT_OK(c, launch_spin(spin, kSpinUs, 1, blocking));
    CLIENT_OK(c, cuMemsetD8(p, 1, 4096));
    c.report("legacy_after_blocking_ms", now_ms() - start);
    CLIENT_RANGE(c, now_ms() - start, 300.0, 1e9);
    CLIENT_OK(c, cuStreamQuery(blocking));
    // Legacy then blocking stream: the blocking stream's memset waits for the legacy kernel.
    start = now_ms();
    CLIENT_OK(c, launch_spin(spin, kSpinUs, 1, nullptr));
    CLIENT_OK(c, cuMemsetD8Async(p, 2, 4096, blocking));
    CLIENT_OK(c, cuStreamSynchronize(blocking));
    CLIENT_RANGE(c, now_ms() - start, 300.0, 1e9);
    CLIENT_OK(c, cuStreamQuery(nullptr));

    // Non-blocking stream then legacy: no implicit wait.
    start = now_ms();
    CLIENT_OK(c, launch_spin(spin, kSpinUs, 1, non_blocking));
    CLIENT_OK(c, cuMemsetD8(p, 3, 4096));
    c.report("legacy_after_non_blocking_ms", now_ms() - start);
    CLIENT_CU(c, cuStreamQuery(non_blocking), CUDA_ERROR_NOT_READY);
    CLIENT_OK(c, cuCtxSynchronize());
    // Legacy then non-blocking stream: no implicit wait either.
    CLIENT_OK(c, launch_spin(spin, kSpinUs, 1, nullptr));
    CLIENT_OK(c, cuMemsetD8Async(p, 4, 4096, non_blocking));
    CLIENT_OK(c, cuStreamSynchronize(non_blocking));
    CLIENT_CU(c, cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
    CLIENT_OK(c, cuCtxSynchronize());
    std::uint8_t byte = 0;
    CLIENT_OK(c, cuMemcpyDtoH(&byte, p, 1));
    CLIENT_CHECK(c, byte == 4);
  });
  expect_clean(client.finish(), "client");
}

// What host functions saw, written from the driver's thread.
struct HostFuncLog {
  std::mutex mu;
  std::vector<int> order;
  double first_ms = 0;
  const std::uint32_t* watched = nullptr;
  std::uint32_t seen = 0;
};

TEST_F(DriverItest, HostFunctionsRunInStreamOrder) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr;
    CUdeviceptr p = 0;
    CUstream stream = nullptr;
    void* pinned = nullptr;
    if (!open_device(c) || !load_kernel(c, "spin", &spin) || !CLIENT_OK(c, cuMemAlloc(&p, 4096)) ||
        !CLIENT_OK(c, cuMemAllocHost(&pinned, 4096)) || !CLIENT_OK(c, cuStreamCreate(&stream, 0))) {
      return;
    }
    HostFuncLog log;
    log.watched = static_cast<const std::uint32_t*>(pinned);
    std::memset(pinned, 0, 4096);
    auto first = [](void* data) {
      auto* l = static_cast<HostFuncLog*>(data);
      std::lock_guard lock(l->mu);
      l->order.push_back(1);
      l->first_ms = now_ms();
    };
    auto second = [](void* data) {
      auto* l = static_cast<HostFuncLog*>(data);
      std::lock_guard lock(l->mu);
      l->order.push_back(2);
      l->seen = *l->watched;
    };
    double start = now_ms();
    CLIENT_OK(c, cuMemsetD32Async(p, 0xc0ffee, 1024, stream));
    CLIENT_OK(c, launch_spin(spin, 50'000, 1, stream));
    CLIENT_OK(c, cuLaunchHostFunc(stream, first, &log));
    CLIENT_OK(c, cuMemcpyDtoHAsync(pinned, p, 4096, stream));
    CLIENT_OK(c, cuLaunchHostFunc(stream, second, &log));
    CLIENT_OK(c, cuStreamSynchronize(stream));
    std::lock_guard lock(log.mu);
    CLIENT_CHECK(c, (log.order == std::vector<int>{1, 2}));
    CLIENT_RANGE(c, log.first_ms - start, 50.0, 1e9);  // after the kernel
    CLIENT_CHECK(c, log.seen == 0xc0ffee);        // after the copy before it
  });
  expect_clean(client.finish(), "client");
}

// What the host sees of device data moved after its op's completion, in order: the scenarios of
// the two tests below.
void moved_data_client(ClientLink& c) {
  constexpr std::size_t kBig = 64 * kMiB;  // some ms of memmove each
  CUdeviceptr a = 0, b = 0, d = 0;
  void* pinned = nullptr;
  CUstream s1 = nullptr, s2 = nullptr;
  CUevent event = nullptr;
  if (!open_device(c) || !CLIENT_OK(c, cuMemAlloc(&a, kBig)) || !CLIENT_OK(c, cuMemAlloc(&b, kBig)) ||
      !CLIENT_OK(c, cuMemAlloc(&d, kBig)) || !CLIENT_OK(c, cuMemAllocHost(&pinned, kBig)) ||
      !CLIENT_OK(c, cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)) ||
      !CLIENT_OK(c, cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING)) || !CLIENT_OK(c, cuEventCreate(&event, 0))) {
    return;
  }
  const auto source = pattern(kBig, 7);
  std::vector<std::uint8_t> back(kBig);
  CLIENT_OK(c, cuMemcpyHtoD(a, source.data(), kBig));

  // A read-back after the stream is done.
  CLIENT_OK(c, cuMemcpyDtoDAsync(b, a, kBig, s1));
  CLIENT_OK(c, cuStreamSynchronize(s1));
  CLIENT_OK(c, cuMemcpyDtoH(back.data(), b, kBig));
  CLIENT_CHECK(c, back == source);

  // Another stream, behind an event: a memset and a copy, then a copy into pinned memory.
  CLIENT_OK(c, cuMemsetD8Async(d, 0x11, kBig, s1));
  CLIENT_OK(c, cuMemcpyDtoDAsync(d, a, kBig / 2, s1));
  CLIENT_OK(c, cuEventRecord(event, s1));
  CLIENT_OK(c, cuStreamWaitEvent(s2, event, 0));
  CLIENT_OK(c, cuMemcpyDtoHAsync(pinned, d, kBig, s2));
  CLIENT_OK(c, cuStreamSynchronize(s2));
  CLIENT_CHECK(c, equal_bytes(pinned, source.data(), kBig / 2));
  CLIENT_CHECK(c, all_equal<std::uint8_t>(static_cast<std::uint8_t*>(pinned) + kBig / 2, kBig / 2, 0x11));

  // A free right after the copy from it is done waits for its bytes to have moved.
  CLIENT_OK(c, cuMemsetD8(b, 0, kBig));
  CLIENT_OK(c, cuMemcpyDtoDAsync(b, a, kBig, s1));
  CLIENT_OK(c, cuStreamSynchronize(s1));
  CLIENT_OK(c, cuMemFree(a));
  CLIENT_OK(c, cuMemcpyDtoH(back.data(), b, kBig));
  CLIENT_CHECK(c, back == source);

  // A pinned source may be reused once its copy is done, even behind a move still queued.
  const auto next = pattern(kBig, 8);
  std::memcpy(pinned, next.data(), kBig);
  CLIENT_OK(c, cuMemcpyDtoDAsync(d, b, kBig, s1));
  CLIENT_OK(c, cuMemcpyHtoDAsync(b, pinned, kBig, s1));
  CLIENT_OK(c, cuStreamSynchronize(s1));
  std::memset(pinned, 0xee, kBig);
  CLIENT_OK(c, cuMemcpyDtoH(back.data(), b, kBig));
  CLIENT_CHECK(c, back == next);
  CLIENT_OK(c, cuMemcpyDtoH(back.data(), d, kBig));
  CLIENT_CHECK(c, back == source);

  // An event recorded after a copy into host memory is done only once its bytes are there,
  // though the event itself moves nothing and a long move is queued ahead.
  std::memset(pinned, 0, kBig);
  CLIENT_OK(c, cuMemcpyDtoDAsync(d, b, kBig, s2));
  CLIENT_OK(c, cuMemcpyDtoHAsync(pinned, b, kBig, s1));
  CLIENT_OK(c, cuEventRecord(event, s1));
  CLIENT_OK(c, cuEventSynchronize(event));
  CLIENT_CHECK(c, equal_bytes(pinned, next.data(), kBig));

  // A host function behind a move reads what the copy into host memory before it wrote.
  struct Seen {
    const std::uint8_t* host = nullptr;
    std::size_t bytes = 0;
    const std::vector<std::uint8_t>* expected = nullptr;
    bool matched = false;
  } seen{static_cast<const std::uint8_t*>(pinned), kBig, &next, false};
  std::memset(pinned, 0, kBig);
  CLIENT_OK(c, cuMemcpyDtoDAsync(d, b, kBig, s2));
  CLIENT_OK(c, cuMemcpyDtoHAsync(pinned, b, kBig, s1));
  CLIENT_OK(c, cuLaunchHostFunc(s1, [](void* data) {
    auto* s = static_cast<Seen*>(data);
    s->matched = equal_bytes(s->host, s->expected->data(), s->bytes);
  }, &seen));
  CLIENT_OK(c, cuCtxSynchronize());
  CLIENT_CHECK(c, seen.matched);
}

// The host moves a device-to-device copy's bytes (and a memset's) off the completion path, after
// the op is signalled done, as a GPU moves them on the device; everything the host can see still
// finds them moved, in order: a read-back, a copy on another stream behind an event, a free, a
// pinned source overwritten once its copy is done, a host function after a copy into host memory.
TEST_F(DriverItest, DataMovedAfterTheCompletionKeepsWhatTheHostSeesInOrder) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), moved_data_client);
  expect_clean(client.finish(), "client");
}

// A move that cannot be queued (out of memory) is made where it came from, after the moves
// queued before it: order and data as with the mover.
TEST_F(DriverItest, AMoveThatCannotBeQueuedKeepsTheOrder) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    ::setenv("SIMGPU_FAIL_QUEUE_MOVE_EVERY", "2", 1);
    moved_data_client(c);
  });
  expect_clean(client.finish(), "client");
}

// A move that cannot be queued waits for the ones queued before it with its op not yet signalled
// and its actions back in the op's pending entry: a free of its source, made meanwhile without a
// synchronisation, waits for it rather than unmapping what it is about to read.
TEST_F(DriverItest, AFreeWaitsForAMoveThatCouldNotBeQueued) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    ::setenv("SIMGPU_FAIL_QUEUE_MOVE_EVERY", "2", 1);
    constexpr std::size_t kBig = 512 * kMiB;  // the first move: a memmove of some hundreds of ms
    constexpr std::size_t kSmall = 64 * 1024;
    CUdeviceptr x = 0, b = 0, a = 0, dst = 0;
    CUstream s = nullptr;
    if (!open_device(c) || !CLIENT_OK(c, cuMemAlloc(&x, kBig)) || !CLIENT_OK(c, cuMemAlloc(&b, kBig)) ||
        !CLIENT_OK(c, cuMemAlloc(&a, kSmall)) || !CLIENT_OK(c, cuMemAlloc(&dst, kSmall)) ||
        !CLIENT_OK(c, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))) {
      return;
    }
    const auto source = pattern(kSmall, 5);
    CLIENT_OK(c, cuMemcpyHtoD(a, source.data(), kSmall));  // short, nothing queued: moved inline
    // Done in this order on the device: the first queued move, then the second, which fails to
    // queue and waits for the first. The program is told of neither.
    CLIENT_OK(c, cuMemcpyDtoDAsync(b, x, kBig, s));
    CLIENT_OK(c, cuMemcpyDtoDAsync(dst, a, kSmall, s));
    std::this_thread::sleep_for(50ms);  // both completions are in, the first move still running
    CLIENT_OK(c, cuMemFree(a));
    std::vector<std::uint8_t> back(kSmall, 0xee);
    CLIENT_OK(c, cuMemcpyDtoH(back.data(), dst, kSmall));
    CLIENT_CHECK(c, back == source);
  });
  expect_clean(client.finish(), "client");
}

// The mover runs at most 1 GiB (Driver::kMaxMovingBytes) behind the device: an op that would put
// it further behind is signalled only once its bytes are in place, and so is what comes after it.
// Device memory is this process's memory, so the test can look at it without asking the driver
// (a read through the driver would wait for the mover in any case).
TEST_F(DriverItest, TheMoverRunsAtMostOneGiBBehindTheDevice) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    constexpr std::size_t kFirst = 640 * kMiB, kSecond = 512 * kMiB;  // together over 1 GiB
    constexpr std::uint32_t kWord = 0x5a5a5a5a;
    CUdeviceptr x = 0, b = 0, y = 0, d = 0;
    CUstream s = nullptr;
    CUevent event = nullptr;
    if (!open_device(c) || !CLIENT_OK(c, cuMemAlloc(&x, kFirst)) || !CLIENT_OK(c, cuMemAlloc(&b, kFirst)) ||
        !CLIENT_OK(c, cuMemAlloc(&y, kSecond)) || !CLIENT_OK(c, cuMemAlloc(&d, kSecond)) ||
        !CLIENT_OK(c, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) || !CLIENT_OK(c, cuEventCreate(&event, 0))) {
      return;
    }
    CLIENT_OK(c, cuMemsetD32(y, kWord, kSecond / 4));
    std::uint32_t word = 0;
    CLIENT_OK(c, cuMemcpyDtoH(&word, y + kSecond - 4, 4));  // behind the memset's move: the mover is idle
    CLIENT_CHECK(c, word == kWord);
    CLIENT_OK(c, cuMemcpyDtoDAsync(b, x, kFirst, s));   // within the cap: signalled as the device ends it
    CLIENT_OK(c, cuMemcpyDtoDAsync(d, y, kSecond, s));  // past it: signalled once moved
    CLIENT_OK(c, cuEventRecord(event, s));
    CLIENT_OK(c, cuEventSynchronize(event));
    const auto* moved = reinterpret_cast<const std::uint32_t*>(static_cast<std::uintptr_t>(d));
    CLIENT_CHECK(c, moved[0] == kWord && moved[kSecond / 4 - 1] == kWord);
  });
  expect_clean(client.finish(), "client");
}

// Copies host memory into device memory and back through a memset and a device-to-device copy;
// reports whether what came back is the pattern, or all zeros (device memory never written).
void device_data_client(ClientLink& c) {
  constexpr std::size_t kBytes = 4 * kMiB;
  CUdeviceptr a = 0, b = 0;
  if (!open_device(c) || !CLIENT_OK(c, cuMemAlloc(&a, kBytes)) || !CLIENT_OK(c, cuMemAlloc(&b, kBytes))) return;
  const auto source = pattern(kBytes, 3);
  std::vector<std::uint8_t> back(kBytes, 0xee);
  CLIENT_OK(c, cuMemcpyHtoD(a, source.data(), kBytes));
  CLIENT_OK(c, cuMemsetD8(b, 0x11, kBytes / 2));
  CLIENT_OK(c, cuMemcpyDtoD(b + kBytes / 2, a + kBytes / 2, kBytes / 2));
  CLIENT_OK(c, cuMemcpyDtoH(back.data(), b, kBytes));
  const bool kept = all_equal<std::uint8_t>(back.data(), kBytes / 2, 0x11) &&
                    equal_bytes(back.data() + kBytes / 2, source.data() + kBytes / 2, kBytes / 2);
  c.report("data", kept ? "kept" : all_equal<std::uint8_t>(back.data(), kBytes, 0) ? "none" : "mixed");
}

// SIMGPU_DEVICE_DATA=none (for benchmarks): device memory keeps nothing, so the host spends no time
// moving its bytes; copies into host memory still run (here they bring back zeros). Any other value
// but "keep" is reported and ignored.
TEST_F(DriverItest, DeviceDataIsKeptUnlessTheEnvironmentSaysNone) {
  start(profile("fifo"));
  const auto run = [&](const char* setting) {
    ClientProcess client(server().socket(), [setting](ClientLink& c) {
      if (setting) ::setenv("SIMGPU_DEVICE_DATA", setting, 1);
      device_data_client(c);
    });
    ClientOutcome outcome = client.finish();
    expect_clean(outcome, setting ? setting : "unset");
    return outcome.values["data"];
  };
  EXPECT_EQ(run(nullptr), "kept");
  EXPECT_EQ(run("keep"), "kept");
  EXPECT_EQ(run("none"), "none");
  EXPECT_EQ(run("nothing"), "kept");
}

// simgpud gone while the mover is still making moves the device finished long ago: the moves not
// begun are dropped with the completions never received, so a host function queued behind them
// never runs, and a wait for the lost device returns without waiting for them.
TEST_F(DriverItest, ALostDeviceDropsWhatTheMoverHasNotBegun) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    constexpr std::size_t kBig = 128 * kMiB;
    constexpr int kCopies = 16;  // 2 GiB of memmove: some hundreds of ms of the mover's time
    CUdeviceptr a = 0, b = 0;
    CUstream s = nullptr;
    if (!open_device(c) || !CLIENT_OK(c, cuMemAlloc(&a, kBig)) || !CLIENT_OK(c, cuMemAlloc(&b, kBig)) ||
        !CLIENT_OK(c, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))) {
      return;
    }
    CUevent half = nullptr;
    if (!CLIENT_OK(c, cuEventCreate(&half, 0))) return;
    static std::atomic<bool> ran{false};
    for (int i = 0; i < kCopies; ++i) {
      CLIENT_OK(c, cuMemcpyDtoDAsync(b, a, kBig, s));
      if (i == kCopies / 2 - 1) CLIENT_OK(c, cuEventRecord(half, s));
    }
    CLIENT_OK(c, cuLaunchHostFunc(s, [](void*) { ran = true; }, nullptr));
    // Up to 1 GiB queued, a device-only move's op is signalled at once: the first half's bytes
    // are queued on the mover (at the least) once this returns.
    CLIENT_OK(c, cuEventSynchronize(half));
    c.ready();
    c.wait_go();  // simgpud is gone
    CLIENT_CU(c, cuStreamSynchronize(s), CUDA_ERROR_DEVICE_UNAVAILABLE);
    // Freed as a program does once told the device is lost: no move may write them later.
    CLIENT_OK(c, cuMemFree(a));
    CLIENT_OK(c, cuMemFree(b));
    std::this_thread::sleep_for(1500ms);  // longer than the moves would have taken
    CLIENT_CHECK(c, !ran);
  });
  ASSERT_TRUE(client.wait_ready());
  // The device runs the copies in a few ms and then asks for the host function; the mover needs
  // some hundreds of ms for their bytes, so it is still at them when simgpud dies.
  std::this_thread::sleep_for(10ms);
  server().kill();
  client.go();
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, PointerAttributesTellDevicePinnedAndPageableMemoryApart) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    CUdeviceptr device = 0;
    void* pinned = nullptr;
    std::vector<char> pageable(4096);
    if (!open_device(c) || !CLIENT_OK(c, cuMemAlloc(&device, 4096)) || !CLIENT_OK(c, cuMemAllocHost(&pinned, 4096))) {
      return;
    }
    CUmemorytype type{};
    CLIENT_OK(c, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, device + 100));
    CLIENT_CHECK(c, type == CU_MEMORYTYPE_DEVICE);
    CLIENT_OK(c, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(pinned)));
    CLIENT_CHECK(c, type == CU_MEMORYTYPE_HOST);
    CLIENT_CU(c, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                       reinterpret_cast<CUdeviceptr>(pageable.data())),
              CUDA_ERROR_INVALID_VALUE);
    int ordinal = -1;
    CLIENT_OK(c, cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, device));
    CLIENT_CHECK(c, ordinal == 0);
    unsigned flags = 99;
    CLIENT_OK(c, cuMemHostGetFlags(&flags, static_cast<char*>(pinned) + 10));
    CLIENT_CHECK(c, flags == 0);
    CLIENT_CU(c, cuMemHostGetFlags(&flags, pageable.data()), CUDA_ERROR_INVALID_VALUE);
    CLIENT_OK(c, cuMemFreeHost(pinned));
    CLIENT_CU(c, cuMemHostGetFlags(&flags, pinned), CUDA_ERROR_INVALID_VALUE);
  });
  expect_clean(client.finish(), "client");
}

TEST_F(DriverItest, LaunchKernelExAndParameterBuffersCarryTheDuration) {
  start(profile("fifo"));
  ClientProcess client(server().socket(), [](ClientLink& c) {
    CUfunction spin = nullptr, three = nullptr;
    CUevent start = nullptr, end = nullptr;
    if (!open_device(c) || !load_kernel(c, "spin", &spin) || !load_kernel(c, "three_params", &three) ||
        !CLIENT_OK(c, cuEventCreate(&start, 0)) || !CLIENT_OK(c, cuEventCreate(&end, 0))) {
      return;
    }
    // cuLaunchKernelEx with kernelParams.
    std::uint64_t us = 30'000;
    void* params[] = {&us};
    CUlaunchConfig config{};
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 64;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = nullptr;
    StreamGate gate;
    CLIENT_OK(c, gate.close(nullptr));
    CLIENT_OK(c, cuEventRecord(start, nullptr));
    CLIENT_OK(c, cuLaunchKernelEx(&config, spin, params, nullptr));
    CLIENT_OK(c, cuEventRecord(end, nullptr));
    gate.open();
    CLIENT_OK(c, cuEventSynchronize(end));
    CLIENT_RANGE(c, elapsed_ms(start, end), 30.0, 30.01);
    // cuLaunchKernel with a packed parameter buffer (`extra`).
    std::uint64_t buffer_us = 40'000;
    std::size_t buffer_size = sizeof buffer_us;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buffer_us, CU_LAUNCH_PARAM_BUFFER_SIZE, &buffer_size,
                     CU_LAUNCH_PARAM_END};
    StreamGate second_gate;
    CLIENT_OK(c, second_gate.close(nullptr));
    CLIENT_OK(c, cuEventRecord(start, nullptr));
    CLIENT_OK(c, cuLaunchKernel(spin, 1, 1, 1, 64, 1, 1, 0, nullptr, nullptr, extra));
    CLIENT_OK(c, cuEventRecord(end, nullptr));
    second_gate.open();
    CLIENT_OK(c, cuEventSynchronize(end));
    CLIENT_RANGE(c, elapsed_ms(start, end), 40.0, 40.01);

    // cuFuncGetParamInfo: offsets and sizes from the PTX, aligned as the ABI packs them.
    std::size_t offset = 99, size = 99;
    CLIENT_OK(c, cuFuncGetParamInfo(three, 0, &offset, &size));
    CLIENT_CHECK(c, offset == 0 && size == 8);
    CLIENT_OK(c, cuFuncGetParamInfo(three, 1, &offset, &size));
    CLIENT_CHECK(c, offset == 8 && size == 4);
    CLIENT_OK(c, cuFuncGetParamInfo(three, 2, &offset, &size));
    CLIENT_CHECK(c, offset == 16 && size == 8);
    CLIENT_CU(c, cuFuncGetParamInfo(three, 3, &offset, &size), CUDA_ERROR_INVALID_VALUE);
    CLIENT_OK(c, cuFuncGetParamInfo(spin, 0, &offset, &size));
    CLIENT_CHECK(c, offset == 0 && size == 8);
    const char* name = nullptr;
    CLIENT_OK(c, cuFuncGetName(&name, three));
    CLIENT_CHECK(c, name && std::string(name) == "three_params");
  });
  expect_clean(client.finish(), "client");
}

}  // namespace
