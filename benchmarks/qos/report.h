// The QoS benchmark's outputs: qos.json (one record per cell and per standalone run) and the
// markdown tables printed and written to qos.md. Pure: results in, text out.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "results.h"

namespace gpuqos::qos {

// `config` is copied into the document as is (options, time scale, wall time).
nlohmann::json results_json(const Results& results, const nlohmann::json& config);

// Two tables: the standalone references, then one row per cell. Valid UTF-8 whatever bytes the
// reasons hold (invalid ones become U+FFFD).
std::string results_markdown(const Results& results, double time_scale);

// `value` with `decimals` digits after the point, as the tables print numbers.
std::string fixed(double value, int decimals);

// The last `lines` lines of `text`.
std::string tail_lines(const std::string& text, std::size_t lines);

}  // namespace gpuqos::qos
