// gpuqosd's numbering of the node's GPUs.
//
// Each process numbers the devices it sees from 0: under CUDA_VISIBLE_DEVICES (Slurm, Kubernetes)
// a job's device 0 is whichever GPU it was given, so the ordinal an op carries cannot say which GPU
// it runs on; its device's UUID (OpDescriptor::device_uuid, protocol 1.7) can. gpuqosd renumbers
// every op into its own device numbers before anything looks at it, so the engines, budgets,
// shares and learning of one GPU are one whatever ordinal its jobs call it by, and two jobs on two
// GPUs never wait for each other.
//
// A GPU gets the number its first job calls it when no other GPU has that number (so without
// CUDA_VISIBLE_DEVICES, or with one value for every job, gpuqosd's numbers are the ordinals), else
// the lowest free number. An op that says no UUID (an older shim; a query mark from a thread with
// no context) is on the GPU that its client said for that ordinal before, else on the number equal
// to its ordinal, which after renumbering may be another GPU's (a client whose GPU ops say none is
// told so once). At most ipc::kMaxDevices GPUs: a new one takes the lowest number of a GPU that no
// client uses then (and inherits its state: a MIG reconfiguration makes new instances), and when
// every number is in use it is numbered by its ordinal (said once). A client that says two UUIDs
// for one ordinal is broken (a process's ordinals do not change while it runs), and so is one that
// names more than kMaxGpusPerClient GPUs, which would crowd the table (a process sees 16 at most on
// today's nodes, and one MIG instance). So is one whose user's clients together would name more
// than kMaxGpusPerUser (an audit filled all 64 numbers with made-up UUIDs from four connections, and
// a real GPU then shared the number of another job's). A GPU that finds the table full is said once
// per UUID (at most kMaxToldFull of them), not once for all.
//
// Per-device settings ([policy.baymax] preemptive_device and timeslice_ms) given by ordinal, each
// job's numbering, are a GPU's by the ordinal its first job called it (config_ordinal), and by the
// ordinal the next job calls it once no client uses it; those given by UUID are its own
// (by_device_number, daemon_config.h).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpuqos/ipc/registration.h"

namespace gpuqos::scheduler {

class DeviceTable {
 public:
  using Uuid = std::array<std::uint8_t, 16>;
  using ClientId = std::uint32_t;

  struct Device {
    std::uint32_t number = 0;
    Uuid uuid{};
    std::uint32_t first_ordinal = 0;  // as its first client called it: whose settings it takes
    std::size_t clients = 0;          // clients that posted work on it and are still here
  };

  static constexpr std::size_t kMaxGpusPerClient = 16;
  static constexpr std::size_t kMaxGpusPerUser = 16;
  static constexpr std::size_t kMaxToldFull = 64;

  struct Renumbered {
    std::uint32_t device = 0;     // gpuqosd's number
    bool added = false;           // a GPU not known before (or a number given to another GPU)
    bool settings_moved = false;  // config_ordinal of some number changed
    std::string note;             // to log (once per situation), or empty
    std::string error;            // the client is broken (two UUIDs for one ordinal, too many GPUs)
  };

  // Where an op of client on its `ordinal` runs, by the UUID it said (all zero: none said). `work`:
  // a GPU op (kernel, copy, memset, graph), not a mark.
  // `uid`: the client's user (its peer credentials).
  Renumbered renumber(ClientId client, std::uint32_t ordinal, const Uuid& uuid, bool work = true,
                      std::uint32_t uid = 0);
  // Its ordinals are forgotten, and the GPUs it used lose a user.
  void client_gone(ClientId client);

  // The ordinal whose per-device settings apply to gpuqosd's device `number`.
  std::uint32_t config_ordinal(std::uint32_t number) const;
  // The UUID of gpuqosd's device `number`, if a GPU has it.
  std::optional<Uuid> uuid_of(std::uint32_t number) const;
  // Do any of gpuqosd's numbers differ from the ordinal whose settings they take?
  bool renumbered() const;
  std::vector<Device> devices() const;  // by number

  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and CUDA_VISIBLE_DEVICES write it.
  static std::string uuid_text(const Uuid& uuid);

 private:
  struct Said {
    Uuid uuid{};
    std::uint32_t device = 0;
  };
  std::optional<std::uint32_t> free_number(std::uint32_t preferred) const;
  void use(ClientId client, std::uint32_t number);

  std::map<Uuid, Device> by_uuid_;
  std::map<std::uint32_t, Uuid> by_number_;
  std::map<ClientId, std::map<std::uint32_t, Said>> said_;   // client -> ordinal -> what it said
  std::map<ClientId, std::set<std::uint32_t>> used_;         // client -> numbers it counts in
  std::set<ClientId> told_no_uuid_;                          // clients told their ops say none
  std::map<ClientId, std::uint32_t> uid_of_;                 // client -> its user
  std::set<Uuid> told_full_;                                 // GPUs told the table was full for them
  // The GPUs the clients of `uid` name (gpuqosd's numbers).
  std::size_t gpus_of_user(std::uint32_t uid) const;
};

}  // namespace gpuqos::scheduler
