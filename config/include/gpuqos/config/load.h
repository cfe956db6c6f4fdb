// Loading a config: TOML text in, a validated Config or every problem (with file:line:column and
// the key) out. Pure: no logging, no globals, nothing changes on failure, so the daemon can try a
// reload on SIGHUP and keep its running config when the new one is bad.
#pragma once

#include <filesystem>
#include <string_view>

#include "gpuqos/config/config.h"
#include "gpuqos/config/result.h"

namespace gpuqos::config {

// Who reads the config. gpuqosd refuses [policy] name = "none" (it means running without gpuqosd),
// reported with the file's other problems, in file order.
struct LoadOptions {
  bool for_gpuqosd = false;
  // gpuqosd about to start with the file (or --check-config): [daemon] socket and profile_store are
  // also checked where they lead, as the daemon would find them (a store that is a directory, a
  // socket under a file), each unless the command line replaces it. Not at a reload, which keeps
  // both as they run.
  bool check_socket_path = false;
  bool check_store_path = false;
};

// Parses `text`; `source_name` (usually the file's path) starts every message. Keys not in the
// schema are errors. Never throws except std::bad_alloc.
Result<Config> parse_config(std::string_view text, std::string_view source_name, LoadOptions options = {});

// Reads the file at `path` and parses it, named by `path` as given. A file that cannot be read
// gives one error naming the path and the reason.
Result<Config> load_config_file(const std::filesystem::path& path, LoadOptions options = {});

}  // namespace gpuqos::config
