// The SIGBUS handler and its table of guarded ranges. The handler may run on any thread at any
// moment, so the table is a fixed array of atomics: no locks, no allocation, only mmap (which is
// async-signal-safe in practice and what the Wayland handler relies on too).
#include "gpuqos/ipc/bus_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace gpuqos::ipc {
namespace {

struct Slot {
  std::atomic<std::uintptr_t> base{0};  // 0: free
  std::atomic<std::size_t> bytes{0};
  std::atomic<bool> faulted{false};
};

std::array<Slot, BusGuard::kMaxGuardedRanges> slots;
struct sigaction previous_action {};

void forward(int signal, siginfo_t* info, void* context) {
  if (previous_action.sa_flags & SA_SIGINFO) {
    if (previous_action.sa_sigaction) previous_action.sa_sigaction(signal, info, context);
    return;
  }
  if (previous_action.sa_handler == SIG_IGN) return;
  if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler) {
    previous_action.sa_handler(signal);
    return;
  }
  // Default: die of SIGBUS, as without the guard. The fault re-runs with the default handler.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  ::sigaction(SIGBUS, &fallback, nullptr);
}

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (Slot& slot : slots) {
    const std::uintptr_t base = slot.base.load(std::memory_order_acquire);
    const std::size_t bytes = slot.bytes.load(std::memory_order_acquire);
    if (base == 0 || address < base || address - base >= bytes) continue;
    const int saved_errno = errno;
    void* mapped = ::mmap(reinterpret_cast<void*>(base), bytes, PROT_READ | PROT_WRITE,
                          MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = saved_errno;
    if (mapped == MAP_FAILED) break;  // nothing we can do: the previous disposition decides
    slot.faulted.store(true, std::memory_order_release);
    return;
  }
  forward(signal, info, context);
}

}  // namespace

Status install_bus_guard() {
  static std::once_flag once;
  static int error = 0;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (::sigaction(SIGBUS, &action, &previous_action) != 0) error = errno;
  });
  if (error != 0) return Error{std::string("cannot install the SIGBUS handler: ") + std::strerror(error)};
  return {};
}

BusGuard::BusGuard(void* base, std::size_t bytes) noexcept {
  if (!base || bytes == 0) return;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    std::uintptr_t expected = 0;
    // Claim with a placeholder so the handler never sees a base without its size.
    if (!slots[i].base.compare_exchange_strong(expected, UINTPTR_MAX, std::memory_order_acq_rel)) continue;
    slots[i].faulted.store(false, std::memory_order_relaxed);
    slots[i].bytes.store(bytes, std::memory_order_release);
    slots[i].base.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
    slot_ = static_cast<int>(i);
    return;
  }
}

BusGuard::~BusGuard() {
  if (slot_ >= 0) {
    slots[static_cast<std::size_t>(slot_)].bytes.store(0, std::memory_order_release);
    slots[static_cast<std::size_t>(slot_)].base.store(0, std::memory_order_release);
  }
}

BusGuard& BusGuard::operator=(BusGuard&& other) noexcept {
  if (this != &other) {
    this->~BusGuard();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

bool BusGuard::faulted() const noexcept {
  return slot_ >= 0 && slots[static_cast<std::size_t>(slot_)].faulted.load(std::memory_order_acquire);
}

}  // namespace gpuqos::ipc
