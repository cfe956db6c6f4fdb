// The Prometheus view of gpuqosd: a DaemonStatus rendered in the text exposition format 0.0.4, the
// body of `GET /metrics` (metrics_server.h serves it). Pure: a function of the snapshot.
//
// Families (seconds as in Prometheus' conventions; every per-job family has the label job_name, not
// job: Prometheus gives every scraped series a job label of its own, the scrape job):
//   gpuqos_query_latency_seconds          summary, quantile 0.5 0.9 0.99 0.999, _sum, _count: the
//                                         queries of high-priority jobs since the daemon started
//   gpuqos_query_target_seconds           gauge, label percentile: the job's target (config)
//   gpuqos_query_meets_target             gauge 1/0: the latency at that percentile is within it
//                                         (counted exactly: at most n - rank queries over it)
//   gpuqos_query_violations_total         counter: queries longer than their target
//   gpuqos_be_ops_completed_total         counter: best-effort GPU ops that ran
//   gpuqos_be_device_seconds_total        counter: the time they were in flight (their spans' union)
//   gpuqos_be_busy_share                  gauge: time in flight / wall time over the last 5 s
//   gpuqos_grants_total, gpuqos_ops_held_total, gpuqos_grant_wait_seconds_total  counters
//   gpuqos_grant_wait_seconds_max         gauge: the longest a held op waited
//   gpuqos_be_held_seconds_total{job_name,reason}  counter: time a best-effort job's next op waited for
//                                         its grant, by reason (hold_reason.h; only from a policy
//                                         that says: baymax)
//   gpuqos_be_backlog_bound_seconds       gauge: the best-effort compute bound now  } only from a
//   gpuqos_be_idle_stream_bound_seconds   gauge: a stream's bound on a preemptive   }
//                                         device with no query in the system there  }
//                                         (idle_bound_factor > 1, preemptive device) }
//   gpuqos_be_backlog_bound_steps_total   counter: adaptation's steps               } policy that
//   gpuqos_long_op_budget_seconds{device}, gpuqos_long_op_budget_cap_seconds{device}  } keeps them
//                                         gauges: the long-op budget and its cap    } (baymax)
//   gpuqos_be_outstanding_seconds{job_name}    gauge: granted compute work not completed }
//   gpuqos_query_arrival_gap_seconds{job_name}, gpuqos_query_allowance_seconds{job_name}  } (baymax)
//                                         gauges: a job that marks its arrivals: their mean gap (once
//                                         8 came) and how long past its own time a query may run }
//   gpuqos_be_held_while_idle_seconds_total{device}  counter: the compute engine had nothing granted
//                                         in flight while a best-effort compute op was held there } (baymax)
//   gpuqos_device_info{device,uuid,ordinal}   gauge: 1 per GPU seen (gpuqosd's device numbers)
//   gpuqos_device_timeslice_seconds{device}   gauge: the slice of a GPU that time-slices
//   gpuqos_engine_backlog_seconds{device,engine}, gpuqos_engine_outstanding_ops{device,engine}  gauges
//   gpuqos_clients{priority}              gauge: connected clients
//   gpuqos_uptime_seconds                 gauge
#pragma once

#include <string>
#include <string_view>

#include "gpuqos/scheduler/status.h"

namespace gpuqos::scheduler {

// The Content-Type of the body render_metrics returns.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string render_metrics(const DaemonStatus& status);

// A label value as the format wants it between double quotes: \ " and newline escaped.
std::string escape_label_value(std::string_view value);

// A sample value: integers without a fraction, others in the shortest form that reads back
// exactly, NaN, +Inf, -Inf.
std::string format_sample_value(double value);

}  // namespace gpuqos::scheduler
