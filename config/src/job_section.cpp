// [[job]]: each job's name, allowed priority, latency target, weight and safety margin; names must
// be unique.
#include <map>

#include "names.h"
#include "readers.h"
#include "sections.h"

namespace gpuqos::config::detail {
namespace {

constexpr double kMinPercentile = 50;
constexpr double kMaxPercentile = 100;  // exclusive: p100 is the maximum, not a percentile target

// False when the job has no valid name (it is then left out; the problem is reported).
bool read_name(Section& section, std::string& out) {
  if (section.find("name") == nullptr) {
    section.error_at_table("name", "missing (every job needs a name)");
    return false;
  }
  auto name = section.string("name");
  if (!name) return false;
  if (!is_valid_job_name(*name)) {
    section.error("name", "must be 1 to 63 of A-Z a-z 0-9 . _ - (got " + quoted(*name) + ")");
    return false;
  }
  out = std::move(*name);
  return true;
}

void read_percentile(Section& section, JobConfig& job) {
  const toml::node* node = section.find("percentile");
  if (node == nullptr) return;
  job.percentile_set = true;
  std::optional<double> value;
  if (const auto* text = node->as_string()) {
    value = parse_percentile(text->get());
    if (!value) section.error("percentile", "must be like 99, 99.9 or \"p99\" (got " + quoted(text->get()) + ")");
  } else if (node->is_number()) {
    value = section.number("percentile");
  } else {
    section.error("percentile",
                  "must be like 99, 99.9 or \"p99\" (got " + std::string(type_phrase(node->type())) + ")");
  }
  if (!value) return;
  if (*value >= kMinPercentile && *value < kMaxPercentile) {
    job.percentile = *value;
    return;
  }
  section.error("percentile", "must be >= 50 and < 100 (got " + format_number(*value) + ")");
}

bool read_job(Section& section, JobConfig& job) {
  read_choice(section, "allowed_priority", kPriorityNames, job.allowed_priority);
  double target_ms = 0;
  read_ms(section, "target_ms", Bound::at_least, kMinPositiveMs, target_ms);
  if (target_ms > 0) job.target_ms = target_ms;
  read_percentile(section, job);
  read_number_up_to(section, "weight", Bound::at_least, kMinWeight, kMaxWeight, job.weight);
  if (section.find("safety_margin_ms") != nullptr) {
    double margin_ms = -1;  // left so when the value is refused (the error is reported)
    read_ms(section, "safety_margin_ms", Bound::at_least, 0, margin_ms);
    if (margin_ms >= 0) job.safety_margin_ms = margin_ms;
  }
  return read_name(section, job.name);
}

}  // namespace

void read_jobs(Diagnostics& diagnostics, const toml::array& jobs, std::vector<JobConfig>& out) {
  std::map<std::string, std::string, std::less<>> first_defined_at;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const toml::node& element = *jobs.get(i);
    const std::string path = "job[" + std::to_string(i) + "]";
    const toml::table* table = element.as_table();
    if (table == nullptr) {
      diagnostics.error(element.source().begin, path,
                        "must be a table (got " + std::string(type_phrase(element.type())) + ")");
      continue;
    }
    Section section(diagnostics, *table, path, kJobKeys);
    JobConfig job;
    if (!read_job(section, job)) continue;
    const auto [first, inserted] =
        first_defined_at.emplace(job.name, diagnostics.place(section.find("name")->source().begin));
    if (inserted)
      out.push_back(std::move(job));
    else
      section.error("name", "duplicate job " + quoted(job.name) + " (first defined at " + first->second + ")");
  }
}

}  // namespace gpuqos::config::detail
