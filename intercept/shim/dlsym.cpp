// dlsym interposition, for programs that dlopen libcuda and look its symbols up themselves.
//
// glibc's dlsym finds RTLD_NEXT (and RTLD_DEFAULT, in dlmopen namespaces) relative to the object
// that called it, found from its return address. A wrapper that calls it would make libgpuqos.so
// the caller and break every other interposer's dlsym(RTLD_NEXT, ...). So on x86-64 dlsym is a
// small trampoline: it asks dlsym_route() and either returns our hook or *jumps* to glibc's dlsym,
// with the program's return address still on the stack. Another interposer of a hooked function
// (an object that defines it and looks up the next definition to chain to) always gets glibc's
// answer: handing it our hook would make the chain call itself forever.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>

#include "shim.h"

namespace gpuqos::intercept {
namespace {

void* no_dlsym(void*, const char*) { return nullptr; }

// glibc's first symbol version on this architecture: dlsym's version before 2.34.
#if defined(__x86_64__)
constexpr const char* kBaseGlibcVersion = "GLIBC_2.2.5";
#elif defined(__aarch64__) || (defined(__powerpc64__) && defined(__LITTLE_ENDIAN__))
constexpr const char* kBaseGlibcVersion = "GLIBC_2.17";
#else
#error "libgpuqos: the first glibc symbol version of dlsym on this architecture is not known"
#endif

DlsymFunction look_up_real_dlsym() {
  // Both versions are the same function in glibc >= 2.34 (GLIBC_2.34 since libdl moved into libc);
  // the architecture's first one is for older glibc (a review: with x86-64's alone, on aarch64 with
  // glibc before 2.34 every dlsym of the program answered nothing).
  for (const char* version : {"GLIBC_2.34", kBaseGlibcVersion}) {
    if (void* fn = dlvsym(RTLD_NEXT, "dlsym", version)) return reinterpret_cast<DlsymFunction>(fn);
  }
  return &no_dlsym;  // never a null pointer to jump to
}

}  // namespace

DlsymFunction real_dlsym() noexcept {
  static std::atomic<DlsymFunction> real{nullptr};  // part of the hook table; racing lookups agree
  DlsymFunction fn = real.load(std::memory_order_acquire);
  if (!fn) {
    fn = look_up_real_dlsym();
    real.store(fn, std::memory_order_release);
  }
  return fn;
}

}  // namespace gpuqos::intercept

using namespace gpuqos::intercept;

// Returned in rax:rdx. forward == 0: `value` is the answer; else jump to `value` (glibc's dlsym).
struct DlsymRoute {
  void* value;
  std::uintptr_t forward;
};

namespace {

// Whether the object containing `caller` defines `name` itself: another interposer of that driver
// function, looking up the next definition to chain to. It must get that definition, never our
// hook (which would call it again: endless recursion).
bool caller_interposes(const void* caller, const char* name) noexcept {
  Dl_info object{};
  if (!caller || dladdr(caller, &object) == 0 || !object.dli_fname) return false;
  void* handle = dlopen(object.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) {
    // Not an object dlopen knows by that name (the program itself, started by a bare name, as a
    // shell finds it on PATH): the failure must not stay for the program's dlerror() after a
    // lookup that succeeds (a review).
    dlerror();
    return false;
  }
  void* found = real_dlsym()(handle, name);
  dlclose(handle);  // NOLOAD took a reference
  Dl_info definer{};
  return found && dladdr(found, &definer) != 0 && definer.dli_fbase == object.dli_fbase;
}

// Whether `found`, what a handle's own search gave for a hooked name, is the definition our hook
// stands in for: the driver's, or the one our hook calls (an interposer after us in the global
// scope, which chains to the driver). Another object's own definition of the name (a library the
// program opened for its wrapper of that function) is that object's answer, not the driver's.
bool is_driver_definition(void* found, const char* name, HookId id) noexcept {
  if (found == resolved_real_function_address(id)) return true;
  void* driver = dlopen(kDriverSoname, RTLD_LAZY | RTLD_NOLOAD);  // never loads it
  if (!driver) return false;
  void* defined = real_dlsym()(driver, name);
  dlclose(driver);  // NOLOAD took a reference
  return found == defined;
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) DlsymRoute gpuqos_dlsym_route(void* handle, const char* name,
                                                                               const void* caller) noexcept {
  const auto hook = name && name[0] == 'c' && name[1] == 'u' ? find_hook(name) : std::nullopt;
  if (!hook || caller_interposes(caller, name)) return {reinterpret_cast<void*>(real_dlsym()), 1};
  // A search of the global scope would find our hook anyway (we are preloaded); from a library
  // after us, RTLD_NEXT is meant to reach the driver, which our hook stands in for.
  if (handle == RTLD_DEFAULT || handle == RTLD_NEXT) return {hook_address(*hook), 0};
  // An explicit handle (the program's dlopen("libcuda.so.1"), or of a library that links it): our
  // hook when what that handle's search finds is the driver's definition, another object's own
  // definition as it is, and glibc's "not found" with its dlerror() message.
  void* found = real_dlsym()(handle, name);
  return {found && is_driver_definition(found, name, *hook) ? hook_address(*hook) : found, 0};
}

#if defined(__x86_64__)
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    endbr64
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    movq 24(%rsp), %rdx
    call gpuqos_dlsym_route
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rdx, %rdx
    jnz 1f
    ret
1:  jmp *%rax
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#else
// Elsewhere a plain wrapper: correct for the program's own lookups; RTLD_NEXT from another
// library then resolves relative to libgpuqos.so (documented limitation).
extern "C" __attribute__((visibility("default"))) void* dlsym(void* handle, const char* name) noexcept {
  const DlsymRoute route = gpuqos_dlsym_route(handle, name, __builtin_return_address(0));
  return route.forward ? reinterpret_cast<DlsymFunction>(route.value)(handle, name) : route.value;
}
#endif
