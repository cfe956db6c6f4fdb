// The duration predictor the daemon consults: predict() for every posted op, observe() for every
// completion. A pure object: no I/O, clocks or threads; not thread-safe (one owner calls it).
//
//   Predictor predictor(config);                                  // or load_profile() (store.h)
//   const OpFeatures f = features_of(descriptor, kernel_name);    // name registered for kernel_id
//   Prediction p = predictor.predict(f);                          // p.duration_ns, p.upper_ns, p.model
//   ...
//   predictor.observe(f, completion.end_ns - completion.start_ns);
//
// Cost: predict() is a hash lookup of the name and at most one scan of that name's <=
// max_samples_per_kernel stored shapes; observe() adds the scoring of every candidate model and an
// occasional small refit (regressions keep running sums). Memory per name is bounded.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpuqos/predictor/config.h"
#include "gpuqos/predictor/copy_model.h"
#include "gpuqos/predictor/features.h"
#include "gpuqos/predictor/kernel_model.h"
#include "gpuqos/predictor/log_moments.h"
#include "gpuqos/predictor/prediction.h"

namespace gpuqos::predictor {

class Predictor {
 public:
  explicit Predictor(PredictorConfig config = {});

  Prediction predict(const OpFeatures& op) const;
  Prediction predict(const KernelFeatures& kernel) const;
  Prediction predict(const CopyFeatures& copy) const;

  // Learns one measured duration. False (and nothing learned) when the duration is not a positive
  // finite number, the op is unsupported, a kernel has no name, or a new name finds config.max_kernels names learned and
  // none of them idle: a name not observed for kIdleEpochs epochs (advance_epochs) gives its place
  // to the new one (the least recently observed first). So a daemon that runs for weeks beside jobs
  // that come and go keeps learning the kernels of the jobs it runs now, and a job that makes up
  // names at a high rate cannot push out a name in use, nor one that was used within the idle time
  // (a service between bursts, a store's trained names). Without epochs (gpuqos train), never.
  bool observe(const OpFeatures& op, double duration_ns);
  bool observe(const KernelFeatures& kernel, double duration_ns);
  bool observe(const CopyFeatures& copy, double duration_ns);

  // The learner's clock: gpuqosd advances one epoch a minute, so a name is idle after an hour.
  static constexpr std::uint64_t kIdleEpochs = 60;
  void advance_epochs(std::uint64_t epochs) { epoch_ += epochs; }
  std::uint64_t epoch() const { return epoch_; }

  const PredictorConfig& config() const { return config_; }
  // The device's SM count (waves = ceil(blocks / SMs)), while nothing is learned yet (no kernel
  // model holds samples banked by the old count): false, and nothing changed, once one is.
  bool adopt_sm_count(std::uint32_t sm_count);
  std::size_t kernel_count() const { return kernels_.size(); }
  std::size_t stored_samples() const;  // kNN samples over all names
  const KernelModel* kernel(std::string_view name) const;
  // The epoch of a learned name's latest observation (none: the name is not learned).
  std::optional<std::uint64_t> last_observed_epoch(std::string_view name) const;
  const CopyModel& copies() const { return copies_; }
  std::vector<std::string> kernel_names() const;  // sorted

  // Persistence (store.h): everything learned, and a predictor rebuilt from it.
  struct State {
    PredictorConfig config;
    std::vector<std::pair<std::string, KernelModel::State>> kernels;
    CopyModel::State copies;
    LogMoments global_log2_ns;  // every kernel observation
  };
  State state() const;
  static Predictor restore(const State& state);

 private:
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const noexcept { return std::hash<std::string_view>{}(name); }
  };

  struct Kernel {
    KernelModel model;
    std::uint64_t last_epoch = 0;  // epoch_ at its latest observation (restored: the epoch it was restored in)
  };
  // Whether a new name may be learned: there is room, or the least recently observed name was idle
  // and is evicted to make it.
  bool make_room();

  PredictorConfig config_;
  std::unordered_map<std::string, Kernel, NameHash, std::equal_to<>> kernels_;
  std::uint64_t epoch_ = 0;                 // since construction or restore (not persisted)
  std::uint64_t no_idle_name_before_ = 0;   // the epoch before which no name can be idle (a bound)
  CopyModel copies_;
  LogMoments global_log2_ns_;  // recent kernel durations, any name: the global default
};

}  // namespace gpuqos::predictor
