// The replayers' command lines (bench_runs.h).
#include "bench_runs.h"

#include <sstream>

namespace gpuqos::qos {

Status status_of(const std::exception& error) {
  const std::string what = error.what();
  const std::size_t line_end = what.find('\n');
  if (line_end == std::string::npos) return {false, what, "", ""};
  std::string reason = what.substr(0, line_end);
  if (reason.ends_with(':')) reason.pop_back();  // "... did not come up (log):" before the tail
  return {false, reason, "", what.substr(line_end + 1)};
}

std::string number(double value) {
  std::ostringstream s;
  s.precision(10);
  s << value;
  return s.str();
}

JobSpec lc_job_spec(const QosRig& rig, double time_scale, std::uint64_t seed, std::optional<double> rate_per_s,
                    bool mark_queries) {
  std::vector<std::string> args{"--workload", rig.workload_file(lc_workload()).string(), "--mode", "lc", "--gaps", "keep",
                                "--pace-scale", number(time_scale), "--seed", std::to_string(seed)};
  if (mark_queries) args.push_back("--mark-queries");
  if (rate_per_s) {
    args.insert(args.end(), {"--rate", number(*rate_per_s)});
  } else {
    args.push_back("--closed-loop");
  }
  return {lc_workload().job, "high", args};
}

JobSpec be_job_spec(const QosRig& rig, const Workload& workload, const std::string& job, double time_scale,
                    bool thread_per_stream) {
  std::vector<std::string> args{"--workload", rig.workload_file(workload).string(), "--mode", "be", "--pace-scale",
                                number(time_scale)};
  if (thread_per_stream) args.push_back("--thread-per-stream");
  return {job, "low", args};
}

}  // namespace gpuqos::qos
