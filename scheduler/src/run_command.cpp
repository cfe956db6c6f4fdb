// `gpuqos run`: environment set-up and exec.
#include "gpuqos/scheduler/run_command.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace gpuqos::scheduler {

std::filesystem::path shim_next_to(const std::filesystem::path& executable) {
  return (executable.parent_path() / ".." / "lib" / "libgpuqos.so").lexically_normal();
}

std::string preload_with(const std::string& shim, const char* existing) {
  std::string result = shim;
  if (existing == nullptr) return result;
  // ld.so separates LD_PRELOAD entries with colons or spaces.
  std::string entries = existing;
  for (char& c : entries) c = c == ':' ? ' ' : c;
  std::istringstream words(entries);
  for (std::string entry; words >> entry;) {
    if (entry != shim) result += ":" + entry;
  }
  return result;
}

namespace {

// The file execvp would run for `program`: as given with a slash, else the first executable file of
// that name on PATH; empty when there is none.
std::filesystem::path resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = ::getenv("PATH");
  std::istringstream folders(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string folder; std::getline(folders, folder, ':');) {
    const std::filesystem::path candidate = std::filesystem::path(folder.empty() ? "." : folder) / program;
    struct stat info{};
    if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return {};
}

// FNV-1a: a name for the link that is the same for one shim path in every build.
std::string path_hash(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(hash));
  return out;
}

// An absolute path without spaces or colons (what ld.so splits LD_PRELOAD at) that leads to `shim`: a link to it in a
// folder only this user can change ($XDG_RUNTIME_DIR/gpuqos-UID, else /tmp/gpuqos-UID), made once
// and reused; nullopt when no such folder can be had.
std::optional<std::string> plain_link_to(const std::filesystem::path& shim) {
  const uid_t uid = ::geteuid();
  std::vector<std::string> bases;
  if (const char* runtime = ::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime == '/') bases.emplace_back(runtime);
  bases.emplace_back("/tmp");
  for (const std::string& base : bases) {
    const std::string folder = base + "/gpuqos-" + std::to_string(uid);
    if (folder.find_first_of(" :") != std::string::npos) continue;
    if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) continue;
    // Another user's folder, or one others may write to, could swap the link for their library.
    struct stat info{};
    if (::lstat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != uid || (info.st_mode & 077) != 0) {
      continue;
    }
    const std::string link = folder + "/libgpuqos-" + path_hash(shim.string()) + ".so";
    std::error_code error;
    if (std::filesystem::read_symlink(link, error) == shim && !error) return link;
    const std::string temp = link + ".new-" + std::to_string(::getpid());
    ::unlink(temp.c_str());
    if (::symlink(shim.c_str(), temp.c_str()) != 0) continue;
    if (::rename(temp.c_str(), link.c_str()) != 0) {
      ::unlink(temp.c_str());
      continue;
    }
    return link;
  }
  return std::nullopt;
}

}  // namespace

bool runs_set_id(const std::string& program) {
  const std::filesystem::path file = resolve_program(program);
  struct stat info{};
  return !file.empty() && ::stat(file.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         (info.st_mode & (S_ISUID | S_ISGID)) != 0;
}

int exec_managed(const RunOptions& options, const std::optional<std::filesystem::path>& shim) {
  // GPUQOS_PRIORITY from the environment stands unless --priority says otherwise, as the job's
  // name and socket do (a user test: `GPUQOS_PRIORITY=high gpuqos run` ran low without a word).
  if (options.priority) {
    ::setenv("GPUQOS_PRIORITY", options.priority->c_str(), 1);
  } else if (const char* inherited = ::getenv("GPUQOS_PRIORITY"); inherited == nullptr || *inherited == '\0') {
    ::setenv("GPUQOS_PRIORITY", "low", 1);
  }
  if (options.job) ::setenv("GPUQOS_JOB", options.job->c_str(), 1);
  if (options.socket) ::setenv("GPUQOS_SOCKET", options.socket->c_str(), 1);
  if (shim) {
    // ld.so splits LD_PRELOAD at spaces and colons and has no escape for them. A shim whose path has
    // one (a clone in "~/My Projects") is preloaded through a link to it whose path has none (a
    // review: such a clone ran every job unmanaged, the benchmark's too). Not by name from a folder
    // put on LD_LIBRARY_PATH: every other library there would come first for the whole job, and a
    // set-ID child (sudo, ping), which looks names up only in the system's folders, would print a
    // loader error each time. Without a link the job runs all the same, unmanaged, as it does when
    // the shim is missing: gpuqos is not the reason it does not run.
    std::optional<std::string> path = shim->string();
    if (path->find_first_of(" :") != std::string::npos) {
      path = plain_link_to(std::filesystem::absolute(*shim));
      if (!path) {
        std::cerr << "gpuqos run: the shim's path " << shim->string()
                  << " has a space or a colon, which LD_PRELOAD cannot carry, and no link to it could be made in "
                     "$XDG_RUNTIME_DIR/gpuqos-UID or /tmp/gpuqos-UID: the job runs unmanaged (install gpuqos "
                     "elsewhere)\n";
      }
    }
    if (path) ::setenv("LD_PRELOAD", preload_with(*path, ::getenv("LD_PRELOAD")).c_str(), 1);
  }
  // A set-user-ID or set-group-ID program (sudo, su, pkexec) that changes who runs it gets no
  // LD_PRELOAD path from the loader, and sudo and su reset the environment besides: the job would
  // run unmanaged without a word (a review). It runs; the user is told.
  if (shim && !options.command.empty() && runs_set_id(options.command.front())) {
    std::cerr << "gpuqos run: " << options.command.front()
              << " is set-user-ID or set-group-ID: the loader does not preload the shim into a program that "
                 "changes who it runs as, and sudo and su reset the environment, so the job may run unmanaged "
                 "(run gpuqos run inside it instead: sudo -u USER gpuqos run ...)\n";
  }
  std::vector<char*> argv;
  for (const auto& word : options.command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int error = errno;
  const std::string& program = options.command.front();
  // exec says EACCES of a directory; a shell says what it is.
  std::error_code ignored;
  const bool directory = error == EACCES && program.find('/') != std::string::npos &&
                         std::filesystem::is_directory(program, ignored);
  std::cerr << "gpuqos run: cannot run " << program << ": " << (directory ? "it is a directory" : std::strerror(error))
            << "\n";
  return error == ENOENT ? 127 : 126;
}

}  // namespace gpuqos::scheduler
