// The profile file GPUQOS_PROFILE names: JSON Lines of device-timed training records, which
// `gpuqos train` reads. Written to <path>.tmp.<pid> as records arrive and added to <path> at the
// end under a lock (commit()), so the processes of a job share one profile.
//
//   line 1:  {"format":"gpuqos-profile","version":1,"job":"<job>","pid":N}
//   kernel:  {"kind":"kernel","name":"<name>","device":0,"grid":[x,y,z],"block":[x,y,z],"shared_bytes":N,
//             "args":[u64,...],"start_ns":S,"end_ns":E}
//   copy:    {"kind":"copy","direction":"h2d"|"d2h"|"d2d","host_memory":"pinned"|"pageable"|"none",
//             "bytes":N,"start_ns":S,"end_ns":E}
//   memset:  {"kind":"memset","bytes":N,"start_ns":S,"end_ns":E}
//
// start_ns/end_ns are CUPTI's timestamps of the op on the device (on simgpu: CLOCK_MONOTONIC).
// Not thread-safe: its owner serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "gpuqos/ipc/descriptor.h"

namespace gpuqos::intercept {

// `text` as the inside of a JSON string: quote, backslash and control characters escaped; other
// bytes (UTF-8 included) kept.
std::string json_escaped(std::string_view text);

// One record line (without the newline).
std::string kernel_line(std::string_view name, const ipc::OpDescriptor& launch, std::uint64_t start_ns,
                        std::uint64_t end_ns);
std::string copy_line(ipc::CopyDirection direction, ipc::HostMemory host_memory, std::uint64_t bytes,
                      std::uint64_t start_ns, std::uint64_t end_ns);
std::string memset_line(std::uint64_t bytes, std::uint64_t start_ns, std::uint64_t end_ns);

class ProfileWriter {
 public:
  ProfileWriter() = default;
  ~ProfileWriter() { discard(); }
  ProfileWriter(const ProfileWriter&) = delete;
  ProfileWriter& operator=(const ProfileWriter&) = delete;

  // Creates the temporary file (`<path>.tmp.<pid>`, or with -1, -2... when that name is taken: a
  // killed process's records, or a link someone planted) and writes the header line. False and
  // `why` when it cannot.
  bool open(const std::string& path, std::string_view job, int pid, std::string& why);
  bool is_open() const { return file_ != nullptr; }
  const std::string& temp_path() const { return temp_path_; }
  static constexpr int kMaxTempNames = 100;

  void write_line(const std::string& line);
  std::uint64_t records() const { return records_; }
  // Hands what is written so far to the kernel (it survives the process being killed).
  void flush();

  // Closes the temporary file and adds its records to the profile at the path, under an exclusive
  // lock of it: every process of a job (ranks, a shell's commands) writes the same GPUQOS_PROFILE,
  // so one replacing another's would lose it. An empty or absent file gets the whole temporary file
  // (header and records); an existing profile gets the records; a file there that is not a
  // gpuqos profile is left alone and the records go to `<path>.<pid>` instead (`written_to`).
  // False and `why` on a write error.
  // The lock is waited for until the file has not grown for `lock_wait` (kLockWait): other
  // processes adding their records are waited for, but one stopped while it holds the lock
  // (SIGSTOP, a debugger) must not hang this one's exit; the records then go to `<path>.<pid>` too
  // (lock_timed_out()).
  bool commit(std::string& why);
  static constexpr std::chrono::milliseconds kLockWait{30'000};
  void set_lock_wait(std::chrono::milliseconds wait) { lock_wait_ = wait; }
  bool lock_timed_out() const { return lock_timed_out_; }
  const std::string& written_to() const { return written_to_; }
  // Whether commit() added to a profile that was there already.
  bool added() const { return added_; }
  // Closes and removes the temporary file (profiling failed: no profile rather than a wrong one).
  void discard();

 private:
  std::string path_, temp_path_, written_to_;
  int pid_ = 0;
  bool added_ = false;
  std::FILE* file_ = nullptr;
  std::uint64_t records_ = 0;
  std::chrono::milliseconds lock_wait_ = kLockWait;
  bool lock_timed_out_ = false;
};

}  // namespace gpuqos::intercept
