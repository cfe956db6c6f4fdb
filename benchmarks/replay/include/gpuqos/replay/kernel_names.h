// Stable PTX entry names for recorded kernel names (which are demangled C++, not identifiers).
#pragma once

#include <string>
#include <string_view>

namespace gpuqos::replay {

// The unqualified function name inside a demangled signature, e.g.
// "void at::native::(anonymous namespace)::indexSelectLargeIndex<float, 2>(...)" -> "indexSelectLargeIndex".
// Returns "" when nothing usable is found.
std::string base_function_name(std::string_view demangled);

// "gq_<index>_<sanitized base name, at most 48 characters>": a valid PTX identifier
// ([A-Za-z_][A-Za-z0-9_]*), unique per index, the same for the same (index, name).
std::string ptx_entry_name(std::size_t index, std::string_view demangled);

// True for a valid PTX identifier of the form this library emits.
bool is_valid_ptx_identifier(std::string_view name);

}  // namespace gpuqos::replay
