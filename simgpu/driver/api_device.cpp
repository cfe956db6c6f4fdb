// Driver API: initialisation, devices, error strings.
#include <cstring>

#include "driver.h"

using namespace gpuqos::simgpu::driver;
namespace wire = gpuqos::simgpu::wire;

namespace {

CUresult device_info(CUdevice dev, const wire::DeviceInfo** info) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || static_cast<std::size_t>(dev) >= d.devices.size()) return CUDA_ERROR_INVALID_DEVICE;
  *info = &d.devices[dev];
  return CUDA_SUCCESS;
}

// Attributes programs commonly read; others a real H100 has are answered with 0.
int attribute_value(const wire::DeviceInfo& info, CUdevice_attribute attrib, int dev) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 48 * 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 227 * 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 228 * 1024;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 64 * 1024;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return info.clock_khz;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return info.memory_clock_khz;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return info.memory_bus_width_bits;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return info.l2_cache_bytes;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return static_cast<int>(info.sms);
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return info.cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return info.cc_minor;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return static_cast<int>(0x18 + driver().wire_device(dev));  // the node's
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
    default: return 0;
  }
}

}  // namespace

SIMGPU_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return driver().init();
}

SIMGPU_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= d.devices.size()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  *count = static_cast<int>(d.devices.size());
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  const wire::DeviceInfo* info = nullptr;
  if (CUresult r = device_info(dev, &info); r != CUDA_SUCCESS) return r;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::size_t n = strnlen(info->name, sizeof info->name);
  n = std::min<std::size_t>(n, static_cast<std::size_t>(len - 1));
  std::memcpy(name, info->name, n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  const wire::DeviceInfo* info = nullptr;
  if (CUresult r = device_info(dev, &info); r != CUDA_SUCCESS) return r;
  if (!pi || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  *pi = attribute_value(*info, attrib, dev);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  const wire::DeviceInfo* info = nullptr;
  if (CUresult r = device_info(dev, &info); r != CUDA_SUCCESS) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = info->memory_bytes;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  const wire::DeviceInfo* info = nullptr;
  if (CUresult r = device_info(dev, &info); r != CUDA_SUCCESS) return r;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(uuid->bytes, info->uuid, sizeof uuid->bytes);
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  const wire::DeviceInfo* info = nullptr;
  if (CUresult r = device_info(dev, &info); r != CUDA_SUCCESS) return r;
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  *major = info->cc_major;
  *minor = info->cc_minor;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuDeviceGetPCIBusId(char* pci_bus_id, int len, CUdevice dev) {
  const wire::DeviceInfo* info = nullptr;
  if (CUresult r = device_info(dev, &info); r != CUDA_SUCCESS) return r;
  if (!pci_bus_id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(pci_bus_id, static_cast<std::size_t>(len), "0000:%02x:00.0", 0x18 + driver().wire_device(dev));
  return CUDA_SUCCESS;
}

namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

#define SIMGPU_ERROR(code, text) {code, #code, text}
constexpr ErrorText kErrors[] = {
    SIMGPU_ERROR(CUDA_SUCCESS, "no error"),
    SIMGPU_ERROR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    SIMGPU_ERROR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    SIMGPU_ERROR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    SIMGPU_ERROR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    SIMGPU_ERROR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    SIMGPU_ERROR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    SIMGPU_ERROR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    SIMGPU_ERROR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    SIMGPU_ERROR(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
    SIMGPU_ERROR(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
    SIMGPU_ERROR(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
    SIMGPU_ERROR(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
    SIMGPU_ERROR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    SIMGPU_ERROR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    SIMGPU_ERROR(CUDA_ERROR_NOT_READY, "device not ready"),
    SIMGPU_ERROR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    SIMGPU_ERROR(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    SIMGPU_ERROR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    SIMGPU_ERROR(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active"),
    SIMGPU_ERROR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    SIMGPU_ERROR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    SIMGPU_ERROR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    SIMGPU_ERROR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    SIMGPU_ERROR(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
    SIMGPU_ERROR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    SIMGPU_ERROR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    SIMGPU_ERROR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "capture was not initiated in this stream"),
    SIMGPU_ERROR(CUDA_ERROR_ILLEGAL_STATE, "the operation is not permitted in the current state"),
    SIMGPU_ERROR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef SIMGPU_ERROR

const ErrorText* find_error(CUresult error) {
  for (const ErrorText& e : kErrors) {
    if (e.code == error) return &e;
  }
  return nullptr;
}

}  // namespace

SIMGPU_EXPORT CUresult cuGetErrorString(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *str = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_EXPORT CUresult cuGetErrorName(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = find_error(error);
  *str = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
