// Driver API: modules, libraries, kernels and functions. Names and parameter layouts come from the image.
#include <fstream>
#include <iterator>

#include "driver.h"

using namespace gpuqos::simgpu::driver;
namespace simgpu = gpuqos::simgpu;
namespace wire = gpuqos::simgpu::wire;

namespace {

CUresult load_image(CUmodule* module, const void* image, std::size_t max_bytes) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  simgpu::ModuleImageResult parsed = simgpu::parse_module_image(image, max_bytes);
  if (!parsed.ok) {
    log_once("cannot load module image: " + parsed.error);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  auto* mod = new CUmod_st();
  mod->ctx = ctx;
  mod->image = std::move(parsed.image);
  d.modules.insert(mod);
  *module = mod;
  return CUDA_SUCCESS;
}

}  // namespace

namespace gpuqos::simgpu::driver {

CUresult get_function_locked(std::unique_lock<std::mutex>& lock, CUmod_st* mod, const char* name, CUfunc_st** out) {
  Driver& d = driver();
  if (auto it = mod->functions.find(name); it != mod->functions.end()) {
    *out = it->second.get();
    return CUDA_SUCCESS;
  }
  const simgpu::KernelEntry* entry = nullptr;
  for (const simgpu::KernelEntry& e : mod->image.kernels) {
    if (e.name == name) entry = &e;
  }
  if (!entry) return CUDA_ERROR_NOT_FOUND;
  auto fn = std::make_unique<CUfunc_st>();
  fn->module = mod;
  fn->entry = *entry;
  fn->kernel_id = d.next_kernel++;
  wire::RegisterKernel msg{0, fn->kernel_id, static_cast<std::uint32_t>(entry->name.size())};
  auto reply = d.request(lock, wire::MsgType::register_kernel, &msg, sizeof msg, &msg.request, entry->name.data(),
                         entry->name.size());
  if (!reply) return CUDA_ERROR_DEVICE_UNAVAILABLE;
  if (!d.modules.contains(mod)) return CUDA_ERROR_INVALID_HANDLE;  // unloaded while we waited
  fn->duration_arg = static_cast<int>(reply->value0) - 1;
  // Another thread may have registered the same name while we waited: keep the first.
  auto [it, inserted] = mod->functions.emplace(name, std::move(fn));
  if (inserted) d.functions.insert(it->second.get());
  *out = it->second.get();
  return CUDA_SUCCESS;
}

CUresult kernel_function_locked(std::unique_lock<std::mutex>& lock, CUkern_st* kernel, CUfunc_st** out) {
  Driver& d = driver();
  CUctx_st* ctx = nullptr;
  if (CUresult r = require_context(&ctx); r != CUDA_SUCCESS) return r;
  CUlib_st* library = kernel->library;
  CUmod_st*& mod = library->modules[ctx];
  if (!mod) {
    mod = new CUmod_st();
    mod->ctx = ctx;
    mod->image = library->image;
    d.modules.insert(mod);
  }
  return get_function_locked(lock, mod, kernel->name.c_str(), out);
}

CUresult resolve_function_locked(std::unique_lock<std::mutex>& lock, CUfunction handle, CUfunc_st** out) {
  Driver& d = driver();
  if (!handle) return CUDA_ERROR_INVALID_HANDLE;
  if (d.functions.contains(handle)) {
    *out = handle;
    return CUDA_SUCCESS;
  }
  auto* kernel = reinterpret_cast<CUkern_st*>(handle);
  if (d.kernels.contains(kernel)) return kernel_function_locked(lock, kernel, out);
  return CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace gpuqos::simgpu::driver

SIMGPU_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) { return load_image(module, image, 0); }

SIMGPU_EXPORT CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return load_image(module, image, 0);
}

SIMGPU_EXPORT CUresult cuModuleLoadFatBinary(CUmodule* module, const void* fat_cubin) {
  return load_image(module, fat_cubin, 0);
}

SIMGPU_EXPORT CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  if (!module || !fname) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream in(fname, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.push_back('\0');  // PTX text is read up to its NUL
  return load_image(module, bytes.data(), bytes.size());
}

SIMGPU_EXPORT CUresult cuModuleUnload(CUmodule module) {
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!d.modules.contains(module)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, fn] : module->functions) d.functions.erase(fn.get());
  for (CUlib_st* library : d.libraries) {
    if (auto it = library->modules.find(module->ctx); it != library->modules.end() && it->second == module) {
      library->modules.erase(it);
    }
  }
  d.modules.erase(module);
  delete module;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::unique_lock lock(d.mu);
  if (!d.modules.contains(hmod)) return CUDA_ERROR_INVALID_HANDLE;
  return get_function_locked(lock, hmod, name, hfunc);
}

SIMGPU_EXPORT CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard lock(d.mu);
  if (!d.modules.contains(mod)) return CUDA_ERROR_INVALID_HANDLE;
  *count = static_cast<unsigned int>(mod->image.kernels.size());
  return CUDA_SUCCESS;
}

// The module's kernels in image order, each as cuModuleGetFunction would give it.
SIMGPU_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int count, CUmodule mod) {
  if (!functions) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::unique_lock lock(d.mu);
  if (!d.modules.contains(mod)) return CUDA_ERROR_INVALID_HANDLE;
  if (count > mod->image.kernels.size()) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::string> names;
  for (unsigned int i = 0; i < count; ++i) names.push_back(mod->image.kernels[i].name);
  for (unsigned int i = 0; i < count; ++i) {
    if (CUresult r = get_function_locked(lock, mod, names[i].c_str(), &functions[i]); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                         CUlibraryOption*, void**, unsigned int) {
  if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  if (!d.initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  simgpu::ModuleImageResult parsed = simgpu::parse_module_image(code, 0);
  if (!parsed.ok) {
    log_once("cannot load library image: " + parsed.error);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  std::lock_guard lock(d.mu);
  auto* lib = new CUlib_st();
  lib->image = std::move(parsed.image);
  d.libraries.insert(lib);
  *library = lib;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.libraries.contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, kernel] : library->kernels) d.kernels.erase(kernel.get());
  for (auto& [ctx, mod] : library->modules) {
    for (auto& [fname, fn] : mod->functions) d.functions.erase(fn.get());
    d.modules.erase(mod);
    delete mod;
  }
  d.libraries.erase(library);
  delete library;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  if (!kernel || !name) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (!d.libraries.contains(library)) return CUDA_ERROR_INVALID_HANDLE;
  if (auto it = library->kernels.find(name); it != library->kernels.end()) {
    *kernel = it->second.get();
    return CUDA_SUCCESS;
  }
  bool found = false;
  for (const simgpu::KernelEntry& e : library->image.kernels) found |= e.name == name;
  if (!found) return CUDA_ERROR_NOT_FOUND;
  auto k = std::make_unique<CUkern_st>();
  k->library = library;
  k->name = name;
  *kernel = k.get();
  d.kernels.insert(k.get());
  library->kernels.emplace(name, std::move(k));
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuKernelGetFunction(CUfunction* func, CUkernel kernel) {
  if (!func) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  if (!d.kernels.contains(kernel)) return CUDA_ERROR_INVALID_HANDLE;
  return kernel_function_locked(lock, kernel, func);
}

SIMGPU_EXPORT CUresult cuFuncGetName(const char** name, CUfunction func) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::lock_guard lock(d.mu);
  if (d.functions.contains(func)) {
    *name = func->entry.name.c_str();
    return CUDA_SUCCESS;
  }
  if (auto* kernel = reinterpret_cast<CUkern_st*>(func); d.kernels.contains(kernel)) {
    *name = kernel->name.c_str();
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_HANDLE;
}

SIMGPU_EXPORT CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  return cuFuncGetName(name, reinterpret_cast<CUfunction>(kernel));
}

SIMGPU_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t index, size_t* offset, size_t* size) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  CUfunc_st* fn = nullptr;
  if (CUresult r = resolve_function_locked(lock, func, &fn); r != CUDA_SUCCESS) return r;
  if (!fn->entry.params_known) return CUDA_ERROR_NOT_SUPPORTED;
  if (index >= fn->entry.params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = fn->entry.params[index].offset;
  if (size) *size = fn->entry.params[index].size;
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction func) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  CUfunc_st* fn = nullptr;
  if (CUresult r = resolve_function_locked(lock, func, &fn); r != CUDA_SUCCESS) return r;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = 48 * 1024; break;
    default:
      if (attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      *pi = 0;
  }
  return CUDA_SUCCESS;
}

SIMGPU_EXPORT CUresult cuFuncSetAttribute(CUfunction func, CUfunction_attribute, int) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  CUfunc_st* fn = nullptr;
  return resolve_function_locked(lock, func, &fn);
}

SIMGPU_EXPORT CUresult cuFuncSetCacheConfig(CUfunction func, CUfunc_cache) {
  Driver& d = driver();
  std::unique_lock lock(d.mu);
  CUfunc_st* fn = nullptr;
  return resolve_function_locked(lock, func, &fn);
}
