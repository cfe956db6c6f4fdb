// A cell's figures against the standalone references (results.h).
#include "results.h"

#include <algorithm>

#include "cell_math.h"

namespace gpuqos::qos {

CellResult evaluate_cell(const Cell& cell, const CellMeasurement& measured, const StandaloneLc& lc_reference,
                         const std::vector<StandaloneBe>& be_references) {
  CellResult r = failed_cell(cell, lc_reference, Status{});
  r.lc = measured.lc;
  r.violation_fraction = violation_fraction(measured.lc.latency_ms, r.target_ms);
  r.gpu_busy_fraction = measured.gpu_busy_fraction;
  std::vector<double> fractions;
  for (const BeRun& run : measured.be) {
    const auto ref = std::find_if(be_references.begin(), be_references.end(), [&](const StandaloneBe& s) {
      return s.job == run.job && s.device_mode == cell.device_mode && s.status.ok;
    });
    const double standalone = ref == be_references.end() ? 0.0 : ref->run.iterations_per_s;
    const double fraction = fraction_of_standalone(run.iterations_per_s, standalone);
    r.be.push_back({run, standalone, fraction});
    fractions.push_back(fraction);
  }
  r.be_fraction_of_ideal = be_fraction_of_ideal(fractions, r.lc_gpu_busy_standalone);
  return r;
}

CellResult failed_cell(const Cell& cell, const StandaloneLc& lc_reference, Status status) {
  CellResult r;
  r.cell = cell;
  r.rate_per_s = lc_reference.rate_per_s;
  r.target_ms = lc_reference.target_ms;
  r.lc_gpu_busy_standalone = lc_reference.gpu_busy_fraction;
  r.status = std::move(status);
  return r;
}

}  // namespace gpuqos::qos
