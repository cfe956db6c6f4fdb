// A JSON value as an error message quotes it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gpuqos::replay {

// A scalar as JSON (at most 80 characters); an array or an object only by its kind and size.
// Untrusted input is never dump()ed whole into a message: dump() recurses once per level, and a
// 200-KB line of nested brackets crashed gpuqos train, gpuqos eval and gpuqosd (an audit).
inline std::string json_text(const nlohmann::json& value) {
  if (value.is_array()) return "an array of " + std::to_string(value.size());
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " keys";
  const std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

}  // namespace gpuqos::replay
