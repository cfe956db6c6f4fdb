// Integration tests of simgpu's libcupti: CUDA driver-API clients (linked to simgpu's libcuda.so.1)
// load build/lib/simgpu/libcupti.so as a collector loads the toolkit's, enable activity kinds, and
// read the records back with the toolkit's own struct types (cupti_activity.h).
//
// The device model is exact in time (noise_cv 0, time_scale 1, one op at a time), so record
// durations are compared with the catalog's and the profile's figures to a few nanoseconds.
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "simgpu/driver_itest_harness.h"

namespace {

using namespace gpuqos::simgpu::itest;

constexpr const char* kPtx = R"(
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 spin_duration_us) { ret; }
)";

constexpr const char* kCatalog = R"({
  "kernels": [{"match": "^spin$", "model": "from_arg", "arg": 0, "unit": "us"}],
  "default_us": 10,
  "noise_cv": 0
})";

// Copy figures stated, so the expected durations below follow from them.
constexpr double kH2dGbps = 25, kD2hGbps = 20, kD2dGbps = 1000, kPageableFactor = 0.5, kCopyLatencyUs = 2;
constexpr const char* kProfile = R"(name = "cupti itest gpu"
sms = 8
compute_mode = "fifo"
h2d_gbps = 25.0
d2h_gbps = 20.0
d2d_gbps = 1000.0
pageable_factor = 0.5
copy_latency_us = 2.0
)";

constexpr std::size_t kBytes = 1 << 20;
constexpr double kToleranceNs = 2;  // the engine rounds fractional nanoseconds

// What the device should take for a copy or memset of `bytes` at `gbps` (GB/s = bytes per ns).
double transfer_ns(std::size_t bytes, double gbps) { return kCopyLatencyUs * 1000 + static_cast<double>(bytes) / gbps; }

// ---------------------------------------------------------------------------------------------
// Client side: the CUPTI functions, resolved from the library, and the buffers it delivered.

struct Cupti {
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) get_result_string = nullptr;
  decltype(&cuptiGetTimestamp) get_timestamp = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) get_next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) get_dropped = nullptr;
  decltype(&cuptiActivityFlushPeriod) flush_period = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop = nullptr;

  // dlopen()s simgpu's libcupti by path, as the shim does by name.
  bool load(ClientLink& c) {
    const std::string path = std::string(GPUQOS_BUILD_DIR) + "/lib/simgpu/libcupti.so";
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!CLIENT_CHECK(c, library != nullptr)) return false;
    bool ok = true;
    const auto resolve = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, name));
      ok = c.check(fn != nullptr, name, __LINE__) && ok;
    };
    resolve(get_version, "cuptiGetVersion");
    resolve(get_result_string, "cuptiGetResultString");
    resolve(get_timestamp, "cuptiGetTimestamp");
    resolve(enable, "cuptiActivityEnable");
    resolve(disable, "cuptiActivityDisable");
    resolve(register_callbacks, "cuptiActivityRegisterCallbacks");
    resolve(flush_all, "cuptiActivityFlushAll");
    resolve(get_next_record, "cuptiActivityGetNextRecord");
    resolve(get_dropped, "cuptiActivityGetNumDroppedRecords");
    resolve(flush_period, "cuptiActivityFlushPeriod");
    resolve(push, "cuptiActivityPushExternalCorrelationId");
    resolve(pop, "cuptiActivityPopExternalCorrelationId");
    return ok;
  }

  std::uint64_t now() const {
    std::uint64_t t = 0;
    get_timestamp(&t);
    return t;
  }
};

// The client's buffers: handed out by buffer_requested, returned (with what CUPTI wrote) by
// buffer_completed. One client per process, so process-wide state is the client's own.
struct Delivery {
  std::mutex mu;
  std::size_t buffer_bytes = 1 << 20;
  bool decline = false;  // buffer_requested gives no buffer
  std::vector<std::vector<std::uint8_t>> buffers;  // the valid bytes of each completed buffer
  std::size_t completed_calls = 0;
};
Delivery delivery;

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  std::lock_guard lock(delivery.mu);
  *size = delivery.decline ? 0 : delivery.buffer_bytes;
  *buffer = delivery.decline ? nullptr : static_cast<std::uint8_t*>(std::aligned_alloc(8, delivery.buffer_bytes));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid) {
  std::lock_guard lock(delivery.mu);
  ++delivery.completed_calls;
  delivery.buffers.emplace_back(buffer, buffer + valid);
  std::free(buffer);
}

// Every record delivered so far, by type, read with cuptiActivityGetNextRecord.
struct Records {
  std::vector<CUpti_ActivityKernel10> kernels;
  std::vector<CUpti_ActivityMemcpy6> copies;
  std::vector<CUpti_ActivityMemset4> memsets;
  std::vector<CUpti_ActivityExternalCorrelation> externals;
  std::vector<std::uint32_t> correlation_order;  // of kernels, copies and memsets, in delivery order
  int unknown = 0;
};

Records read_records(const Cupti& cupti) {
  Records out;
  std::lock_guard lock(delivery.mu);
  for (std::vector<std::uint8_t>& buffer : delivery.buffers) {
    CUpti_Activity* record = nullptr;
    while (cupti.get_next_record(buffer.data(), buffer.size(), &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
          out.kernels.push_back(*reinterpret_cast<CUpti_ActivityKernel10*>(record));
          out.correlation_order.push_back(out.kernels.back().correlationId);
          break;
        case CUPTI_ACTIVITY_KIND_MEMCPY:
          out.copies.push_back(*reinterpret_cast<CUpti_ActivityMemcpy6*>(record));
          out.correlation_order.push_back(out.copies.back().correlationId);
          break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
          out.memsets.push_back(*reinterpret_cast<CUpti_ActivityMemset4*>(record));
          out.correlation_order.push_back(out.memsets.back().correlationId);
          break;
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
          out.externals.push_back(*reinterpret_cast<CUpti_ActivityExternalCorrelation*>(record));
          break;
        default: ++out.unknown;
      }
    }
  }
  return out;
}

// cuInit, device 0's primary context current, and the spin kernel.
bool open_device(ClientLink& c, CUfunction* spin) {
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  return CLIENT_OK(c, cuInit(0)) && CLIENT_OK(c, cuDeviceGet(&device, 0)) &&
         CLIENT_OK(c, cuDevicePrimaryCtxRetain(&ctx, device)) && CLIENT_OK(c, cuCtxSetCurrent(ctx)) &&
         CLIENT_OK(c, cuModuleLoadData(&module, kPtx)) && CLIENT_OK(c, cuModuleGetFunction(spin, module, "spin"));
}

CUresult launch_spin(CUfunction spin, std::uint64_t duration_us, CUstream stream, unsigned shared_bytes = 0) {
  void* params[] = {&duration_us};
  return cuLaunchKernel(spin, 4, 2, 1, 128, 1, 1, shared_bytes, stream, params, nullptr);
}

bool enable_all(ClientLink& c, const Cupti& cupti) {
  bool ok = c.check(cupti.register_callbacks(&buffer_requested, &buffer_completed) == CUPTI_SUCCESS,
                    "register callbacks", __LINE__);
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
    ok = c.check(cupti.enable(kind) == CUPTI_SUCCESS, "enable", __LINE__) && ok;
  }
  return ok;
}

#define CLIENT_NEAR(link, value, expected, tolerance) \
  CLIENT_RANGE(link, static_cast<double>(value), (expected) - (tolerance), (expected) + (tolerance) + 1e-9)

// Kernels, copies of every kind and a memset, some under external ids: every record as the device ran it.
void records_client(ClientLink& c) {
  Cupti cupti;
  CUfunction spin = nullptr;
  if (!cupti.load(c) || !open_device(c, &spin) || !enable_all(c, cupti)) return;
  CUstream stream = nullptr;
  CUdeviceptr device_a = 0, device_b = 0;
  void* pinned = nullptr;
  std::vector<unsigned char> pageable(kBytes, 7);
  if (!CLIENT_OK(c, cuStreamCreate(&stream, 0)) || !CLIENT_OK(c, cuMemAlloc(&device_a, kBytes)) ||
      !CLIENT_OK(c, cuMemAlloc(&device_b, kBytes)) || !CLIENT_OK(c, cuMemAllocHost(&pinned, kBytes))) {
    return;
  }
  const std::uint64_t before = cupti.now();
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1001) == CUPTI_SUCCESS);
  CLIENT_OK(c, launch_spin(spin, 200, stream, 1024));
  std::uint64_t popped = 0;
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped) == CUPTI_SUCCESS && popped == 1001);
  CLIENT_OK(c, launch_spin(spin, 50, stream));  // no external id
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1002) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 77) == CUPTI_SUCCESS);  // a second kind
  CLIENT_OK(c, cuMemcpyHtoDAsync(device_a, pinned, kBytes, stream));
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, nullptr) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr) == CUPTI_SUCCESS);
  CLIENT_OK(c, cuMemcpyHtoD(device_a, pageable.data(), kBytes));  // legacy stream: after `stream`
  CLIENT_OK(c, cuMemcpyDtoH(pinned, device_a, kBytes));
  CLIENT_OK(c, cuMemcpyDtoD(device_b, device_a, kBytes));
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1003) == CUPTI_SUCCESS);
  CLIENT_OK(c, cuMemsetD32Async(device_b, 0xdeadbeef, kBytes / 4, stream));
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr) == CUPTI_SUCCESS);
  CLIENT_OK(c, cuCtxSynchronize());
  const std::uint64_t after = cupti.now();
  CLIENT_CHECK(c, cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS);

  const Records r = read_records(cupti);
  c.report("kernels", static_cast<double>(r.kernels.size()));
  if (!CLIENT_CHECK(c, r.kernels.size() == 2 && r.copies.size() == 4 && r.memsets.size() == 1 && r.unknown == 0)) {
    return;
  }
  // Kernels: the launch's shape and the catalog's duration (the spin argument, in us).
  for (std::size_t i = 0; i < 2; ++i) {
    const CUpti_ActivityKernel10& k = r.kernels[i];
    CLIENT_CHECK(c, k.kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    CLIENT_CHECK(c, k.name != nullptr && std::string(k.name) == "spin");
    CLIENT_CHECK(c, k.gridX == 4 && k.gridY == 2 && k.gridZ == 1 && k.blockX == 128 && k.blockY == 1 && k.blockZ == 1);
    CLIENT_CHECK(c, k.deviceId == 0 && k.contextId != 0 && k.streamId != 0 && k.correlationId != 0);
    CLIENT_CHECK(c, k.staticSharedMemory == 0);
    CLIENT_NEAR(c, k.end - k.start, i == 0 ? 200000.0 : 50000.0, kToleranceNs);
    CLIENT_CHECK(c, k.completed == k.end);
    CLIENT_CHECK(c, k.start >= before && k.end <= after);  // records and cuptiGetTimestamp share one clock
  }
  CLIENT_CHECK(c, r.kernels[0].dynamicSharedMemory == 1024 && r.kernels[1].dynamicSharedMemory == 0);
  CLIENT_CHECK(c, r.kernels[1].start >= r.kernels[0].end);  // one stream: in order
  CLIENT_CHECK(c, r.kernels[0].streamId == r.kernels[1].streamId);

  // Copies: kind, memory on each side, bytes, and the profile's bandwidth.
  struct Expected {
    std::uint8_t copy_kind, src, dst;
    bool async;
    double ns;
  };
  const Expected expected[] = {
      {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, true,
       transfer_ns(kBytes, kH2dGbps)},
      {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, false,
       transfer_ns(kBytes, kH2dGbps * kPageableFactor)},
      {CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, false,
       transfer_ns(kBytes, kD2hGbps)},
      {CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, false,
       transfer_ns(kBytes, kD2dGbps)},
  };
  for (std::size_t i = 0; i < 4; ++i) {
    const CUpti_ActivityMemcpy6& m = r.copies[i];
    c.report("copy" + std::to_string(i) + "_ns", static_cast<double>(m.end - m.start));
    CLIENT_CHECK(c, m.copyKind == expected[i].copy_kind && m.srcKind == expected[i].src && m.dstKind == expected[i].dst);
    CLIENT_CHECK(c, m.bytes == kBytes && m.copyCount == 1 && m.correlationId != 0);
    CLIENT_CHECK(c, ((m.flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC) != 0) == expected[i].async);
    CLIENT_NEAR(c, m.end - m.start, expected[i].ns, kToleranceNs);
    CLIENT_CHECK(c, m.start >= before && m.end <= after);
  }
  // The memset: bytes, value, the device-local bandwidth.
  const CUpti_ActivityMemset4& s = r.memsets[0];
  CLIENT_CHECK(c, s.bytes == kBytes && s.value == 0xdeadbeef && s.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  CLIENT_CHECK(c, (s.flags & CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC) != 0);
  CLIENT_NEAR(c, s.end - s.start, transfer_ns(kBytes, kD2dGbps), kToleranceNs);

  // Correlation: one id per call, increasing in submission order; external ids pair with them.
  const std::vector<std::uint32_t> submitted = {r.kernels[0].correlationId, r.kernels[1].correlationId,
                                                r.copies[0].correlationId,  r.copies[1].correlationId,
                                                r.copies[2].correlationId,  r.copies[3].correlationId,
                                                s.correlationId};
  CLIENT_CHECK(c, std::is_sorted(submitted.begin(), submitted.end()) &&
                      std::set<std::uint32_t>(submitted.begin(), submitted.end()).size() == submitted.size());
  std::set<std::tuple<int, std::uint64_t, std::uint32_t>> externals;
  for (const auto& e : r.externals) externals.emplace(e.externalKind, e.externalId, e.correlationId);
  const std::set<std::tuple<int, std::uint64_t, std::uint32_t>> want = {
      {CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1001, r.kernels[0].correlationId},
      {CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1002, r.copies[0].correlationId},
      {CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 77, r.copies[0].correlationId},
      {CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1003, s.correlationId}};
  CLIENT_CHECK(c, externals == want);
  CLIENT_CHECK(c, r.externals.size() == want.size());
}

// Only enabled kinds are recorded; KERNEL records carry that kind; a graph launch records its nodes;
// a disabled kind stops at once.
void kinds_client(ClientLink& c) {
  Cupti cupti;
  CUfunction spin = nullptr;
  if (!cupti.load(c) || !open_device(c, &spin)) return;
  CUstream stream = nullptr;
  CUdeviceptr device = 0;
  if (!CLIENT_OK(c, cuStreamCreate(&stream, 0)) || !CLIENT_OK(c, cuMemAlloc(&device, kBytes))) return;
  CLIENT_CHECK(c, cupti.register_callbacks(&buffer_requested, &buffer_completed) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.enable(CUPTI_ACTIVITY_KIND_KERNEL) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.enable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.enable(CUPTI_ACTIVITY_KIND_DRIVER) == CUPTI_ERROR_NOT_SUPPORTED);  // not simulated
  CLIENT_CHECK(c, cupti.enable(static_cast<CUpti_ActivityKind>(100000)) == CUPTI_ERROR_INVALID_KIND);
  CLIENT_OK(c, launch_spin(spin, 20, stream));
  CLIENT_OK(c, cuMemcpyDtoDAsync(device, device, 1024, stream));  // MEMCPY is not enabled
  CLIENT_OK(c, cuMemsetD8Async(device, 1, 4096, stream));
  // A captured graph of a kernel and a memset, launched: a record of each node, with the graph's id
  // and the launch's correlation id, each with the whole graph's times (simgpud times a graph as a
  // unit), and one EXTERNAL_CORRELATION record for the launch.
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CLIENT_OK(c, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CLIENT_OK(c, launch_spin(spin, 30, stream));
  CLIENT_OK(c, cuMemsetD8Async(device, 2, 4096, stream));
  CLIENT_OK(c, cuStreamEndCapture(stream, &graph));
  CLIENT_OK(c, cuGraphInstantiateWithFlags(&exec, graph, 0));
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, 5) == CUPTI_SUCCESS);
  CLIENT_OK(c, cuGraphLaunch(exec, stream));
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, nullptr) == CUPTI_SUCCESS);
  CLIENT_OK(c, cuStreamSynchronize(stream));
  CLIENT_CHECK(c, cupti.disable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS);
  CLIENT_OK(c, cuMemsetD8(device, 3, 4096));  // after disable: no record
  CLIENT_CHECK(c, cupti.flush_all(0) == CUPTI_SUCCESS);
  const Records r = read_records(cupti);
  CLIENT_CHECK(c, r.kernels.size() == 2 && r.copies.empty() && r.memsets.size() == 2 && r.externals.size() == 1);
  if (r.kernels.size() != 2 || r.memsets.size() != 2 || r.externals.size() != 1) return;
  CLIENT_CHECK(c, r.kernels[0].kind == CUPTI_ACTIVITY_KIND_KERNEL && r.kernels[1].kind == CUPTI_ACTIVITY_KIND_KERNEL);
  CLIENT_CHECK(c, r.kernels[0].graphId == 0 && r.memsets[0].graphId == 0);
  CLIENT_NEAR(c, r.kernels[0].end - r.kernels[0].start, 20000.0, kToleranceNs);
  CLIENT_CHECK(c, r.memsets[0].bytes == 4096 && r.memsets[0].value == 1);
  const CUpti_ActivityKernel10& node_kernel = r.kernels[1];
  const CUpti_ActivityMemset4& node_memset = r.memsets[1];
  CLIENT_CHECK(c, node_kernel.graphId != 0 && node_memset.graphId == node_kernel.graphId);
  CLIENT_CHECK(c, node_kernel.correlationId == node_memset.correlationId);
  CLIENT_CHECK(c, r.externals[0].externalId == 5 && r.externals[0].correlationId == node_kernel.correlationId);
  CLIENT_CHECK(c, node_kernel.correlationId > r.kernels[0].correlationId);
  CLIENT_CHECK(c, node_kernel.graphNodeId != node_memset.graphNodeId);
  CLIENT_CHECK(c, node_kernel.gridId != r.kernels[0].gridId);
  CLIENT_CHECK(c, std::string(node_kernel.name) == "spin");
  CLIENT_CHECK(c, node_memset.bytes == 4096 && node_memset.value == 2);
  CLIENT_CHECK(c, node_kernel.start == node_memset.start && node_kernel.end == node_memset.end);
  CLIENT_CHECK(c, node_kernel.end - node_kernel.start >= 30000);  // the kernel's 30 us and the memset
}

// Delivery: small buffers are filled with whole records, in order; declined buffers drop records,
// which cuptiActivityGetNumDroppedRecords counts; with a flush period the worker delivers unasked.
void delivery_client(ClientLink& c) {
  Cupti cupti;
  CUfunction spin = nullptr;
  if (!cupti.load(c) || !open_device(c, &spin)) return;
  CUstream stream = nullptr;
  if (!CLIENT_OK(c, cuStreamCreate(&stream, 0))) return;
  {
    std::lock_guard lock(delivery.mu);
    delivery.buffer_bytes = 2 * sizeof(CUpti_ActivityKernel10) + 8;  // room for two kernel records
  }
  CLIENT_CHECK(c, cupti.register_callbacks(&buffer_requested, &buffer_completed) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  for (std::uint64_t us = 1; us <= 5; ++us) CLIENT_OK(c, launch_spin(spin, us, stream));
  CLIENT_OK(c, cuStreamSynchronize(stream));
  CLIENT_CHECK(c, cupti.flush_all(0) == CUPTI_SUCCESS);
  Records r = read_records(cupti);
  CLIENT_CHECK(c, delivery.completed_calls == 3);  // 2 + 2 + 1 records
  CLIENT_CHECK(c, r.kernels.size() == 5);
  for (std::size_t i = 0; i < r.kernels.size(); ++i) {
    CLIENT_NEAR(c, r.kernels[i].end - r.kernels[i].start, 1000.0 * static_cast<double>(i + 1), kToleranceNs);
  }
  {
    std::lock_guard lock(delivery.mu);
    delivery.decline = true;
    delivery.buffers.clear();
  }
  for (int i = 0; i < 3; ++i) CLIENT_OK(c, launch_spin(spin, 1, stream));
  CLIENT_OK(c, cuStreamSynchronize(stream));
  CLIENT_CHECK(c, cupti.flush_all(0) == CUPTI_SUCCESS);
  std::size_t dropped = 0;
  CLIENT_CHECK(c, cupti.get_dropped(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped == 3);
  CLIENT_CHECK(c, read_records(cupti).kernels.empty());
  // With a flush period, records arrive without a flush.
  {
    std::lock_guard lock(delivery.mu);
    delivery.decline = false;
  }
  CLIENT_CHECK(c, cupti.flush_period(10) == CUPTI_SUCCESS);
  CLIENT_OK(c, launch_spin(spin, 1, stream));
  CLIENT_OK(c, cuStreamSynchronize(stream));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (read_records(cupti).kernels.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  CLIENT_CHECK(c, read_records(cupti).kernels.size() == 1);
}

// The API's plain answers: version, result strings, the external-id stack, record iteration.
void api_client(ClientLink& c) {
  Cupti cupti;
  if (!cupti.load(c)) return;
  std::uint32_t version = 0;
  CLIENT_CHECK(c, cupti.get_version(&version) == CUPTI_SUCCESS && version == CUPTI_API_VERSION);
  const char* text = nullptr;
  CLIENT_CHECK(c, cupti.get_result_string(CUPTI_ERROR_QUEUE_EMPTY, &text) == CUPTI_SUCCESS &&
                      std::string(text) == "CUPTI_ERROR_QUEUE_EMPTY");
  // Per kind, last in first out; an empty stack says so.
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, 1) == CUPTI_SUCCESS);
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, 2) == CUPTI_SUCCESS);
  std::uint64_t id = 0;
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &id) == CUPTI_SUCCESS && id == 2);
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id) == CUPTI_ERROR_QUEUE_EMPTY);
  CLIENT_CHECK(c, cupti.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &id) == CUPTI_SUCCESS && id == 1);
  CLIENT_CHECK(c, cupti.push(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID, 1) == CUPTI_ERROR_INVALID_KIND);
  // Iteration: an empty buffer has no record; a truncated record is not returned.
  alignas(8) std::uint8_t buffer[sizeof(CUpti_ActivityMemset4)] = {};
  CUpti_Activity* record = nullptr;
  CLIENT_CHECK(c, cupti.get_next_record(buffer, 0, &record) == CUPTI_ERROR_MAX_LIMIT_REACHED);
  CUpti_ActivityMemset4 memset_record{};
  memset_record.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  std::memcpy(buffer, &memset_record, sizeof memset_record);
  CLIENT_CHECK(c, cupti.get_next_record(buffer, sizeof buffer - 8, &record) == CUPTI_ERROR_INVALID_KIND);
  record = nullptr;
  CLIENT_CHECK(c, cupti.get_next_record(buffer, sizeof buffer, &record) == CUPTI_SUCCESS &&
                      record == reinterpret_cast<CUpti_Activity*>(buffer));
  CLIENT_CHECK(c, cupti.get_next_record(buffer, sizeof buffer, &record) == CUPTI_ERROR_MAX_LIMIT_REACHED);
  // No callbacks registered yet: nothing to flush into.
  CLIENT_CHECK(c, cupti.flush_all(0) == CUPTI_ERROR_INVALID_OPERATION);
}

class CuptiItest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = std::make_unique<SimgpudServer>(kProfile, kCatalog); }
  void TearDown() override {
    if (HasFailure()) std::cerr << "---- simgpud log ----\n" << server_->log_text() << "---------------------\n";
    server_.reset();
  }
  void run(const std::function<void(ClientLink&)>& body) {
    ClientProcess client(server_->socket(), body);
    expect_clean(client.finish(), "client");
  }
  std::unique_ptr<SimgpudServer> server_;
};

TEST_F(CuptiItest, KernelCopyAndMemsetRecordsCarryTheDevicesTimesShapesAndCorrelation) { run(records_client); }

TEST_F(CuptiItest, OnlyEnabledKindsAreRecordedAndAGraphLaunchAsItsNodes) { run(kinds_client); }

TEST_F(CuptiItest, SmallBuffersGetWholeRecordsInOrderDeclinedOnesCountAsDroppedAndAPeriodDelivers) { run(delivery_client); }

TEST_F(CuptiItest, VersionResultStringsExternalIdStacksAndRecordIteration) { run(api_client); }

}  // namespace
