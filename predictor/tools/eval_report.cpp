// EvalResult as a text table or JSON.
#include "eval_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace gpuqos::predictor::detail {

namespace {

// Nothing scored: null errors, not 0 (which a script would read as a perfect model).
nlohmann::json summary_json(const ErrorSummary& s) {
  const auto error = [&](double value) { return s.count > 0 ? nlohmann::json(value) : nlohmann::json(nullptr); };
  return {{"median_ape", error(s.median_ape)}, {"mape", error(s.mape)}, {"p90_ape", error(s.p90_ape)}, {"count", s.count}};
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%7.2f%%", fraction * 100.0);
  return text;
}

void row(std::ostream& out, const std::string& label, const ErrorSummary& s) {
  out << "  " << percent(s.median_ape) << "  " << percent(s.mape) << "  " << percent(s.p90_ape) << "  " << s.count << "  "
      << (label.size() > 90 ? label.substr(0, 87) + "..." : label) << "\n";
}

}  // namespace

std::string eval_json(const EvalResult& result, const std::string& mode) {
  nlohmann::json j{{"mode", mode}, {"kernels", summary_json(result.kernels)}, {"copies", summary_json(result.copies)}};
  j["per_kernel"] = nlohmann::json::object();
  for (const auto& [name, s] : result.per_kernel) j["per_kernel"][name] = summary_json(s);
  j["per_copy_class"] = nlohmann::json::object();
  for (const auto& [name, s] : result.per_copy_class) j["per_copy_class"][name] = summary_json(s);
  j["answered_by"] = result.answered_by;
  j["candidates"] = result.candidates;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);  // never abort on a name's bytes
}

void print_eval_text(const EvalResult& result, const std::string& mode, bool per_kernel, std::ostream& out) {
  out << "evaluation: " << mode << "\n";
  out << "  median APE      MAPE   p90 APE  count  what\n";
  if (result.kernels.count > 0) row(out, "kernels (all)", result.kernels);
  if (per_kernel) {
    for (const auto& [name, s] : result.per_kernel) row(out, "  " + name, s);
  }
  if (result.copies.count > 0) row(out, "copies and memsets (all)", result.copies);
  for (const auto& [name, s] : result.per_copy_class) row(out, "  " + name, s);
  out << "answered by:";
  for (const auto& [model, n] : result.answered_by) out << " " << model << "=" << n;
  out << "\nkernel models:";
  for (const auto& [candidate, n] : result.candidates) out << " " << candidate << "=" << n;
  out << "\n";
}

}  // namespace gpuqos::predictor::detail
