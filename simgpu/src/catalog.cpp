// Loads kernel catalogs from JSON and turns a kernel launch into a simulated duration.
#include "gpuqos/simgpu/catalog.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string_view>

namespace gpuqos::simgpu {
namespace {

using nlohmann::json;

// "file:line:column" of the byte nlohmann stopped at (its offset counts from 1).
std::string syntax_location(std::string_view text, std::size_t byte, const std::string& source) {
  const std::size_t offset = std::min(byte > 0 ? byte - 1 : 0, text.size());
  const std::string_view before = text.substr(0, offset);
  const std::size_t line =
      1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  const std::size_t newline = before.rfind('\n');
  const std::size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
  return source + ":" + std::to_string(line) + ":" + std::to_string(offset - line_start + 1);
}

// A JSON value being checked, with its path for error messages (e.g. "kernels[2].us").
class Value {
 public:
  Value(const std::string& source, std::string path, const json& value)
      : source_(source), path_(std::move(path)), value_(value) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw CatalogError(source_ + ": " + path_ + ": " + std::string(what));
  }

  Value member(std::string_view key) const {
    const auto it = value_.find(key);
    if (it == value_.end()) {
      throw CatalogError(source_ + ": " + child_path(key) + ": missing key");
    }
    return Value(source_, child_path(key), *it);
  }

  // Rejects every member not named in `allowed`.
  void only_keys(std::initializer_list<std::string_view> allowed, std::string_view why) const {
    for (const auto& [key, unused] : value_.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        throw CatalogError(source_ + ": " + child_path(key) + ": unknown key" + std::string(why));
      }
    }
  }

  const json& object() const {
    if (!value_.is_object()) fail("must be an object");
    return value_;
  }

  double non_negative() const {
    if (!value_.is_number() || !(value_.get<double>() >= 0) ||
        !std::isfinite(value_.get<double>())) {
      fail("must be a number >= 0, got " + value_.dump());
    }
    return value_.get<double>();
  }

  std::string text() const {
    if (!value_.is_string()) fail("must be a string, got " + value_.dump());
    return value_.get<std::string>();
  }

  std::uint64_t unsigned_integer(std::uint64_t max) const {
    if (!value_.is_number_integer() || value_.is_number_float() ||
        (!value_.is_number_unsigned() && value_.get<std::int64_t>() < 0) ||
        value_.get<std::uint64_t>() > max) {
      fail("must be an integer in 0.." + std::to_string(max) + ", got " + value_.dump());
    }
    return value_.get<std::uint64_t>();
  }

  const std::string& path() const { return path_; }
  const json& raw() const { return value_; }

 private:
  std::string child_path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const std::string& source_;
  std::string path_;
  const json& value_;
};

double unit_ns(const Value& unit) {
  const std::string name = unit.text();
  if (name == "ns") return 1;
  if (name == "us") return 1e3;
  if (name == "ms") return 1e6;
  if (name == "s") return 1e9;
  unit.fail("must be one of \"ns\", \"us\", \"ms\", \"s\", got " + unit.raw().dump());
}

KernelModel read_model(const Value& entry) {
  const Value kind = entry.member("model");
  const std::string name = kind.text();
  KernelModel model;
  if (name == "fixed") {
    entry.only_keys({"match", "model", "us"}, " for model 'fixed'");
    model.kind = KernelModel::Kind::fixed;
    model.us = entry.member("us").non_negative();
  } else if (name == "per_block") {
    entry.only_keys({"match", "model", "base_us", "per_block_us"}, " for model 'per_block'");
    model.kind = KernelModel::Kind::per_block;
    model.base_us = entry.member("base_us").non_negative();
    model.per_block_us = entry.member("per_block_us").non_negative();
  } else if (name == "from_arg") {
    entry.only_keys({"match", "model", "arg", "unit"}, " for model 'from_arg'");
    model.kind = KernelModel::Kind::from_arg;
    model.arg = static_cast<int>(entry.member("arg").unsigned_integer(63));
    model.arg_unit_ns = unit_ns(entry.member("unit"));
  } else {
    kind.fail("must be one of \"fixed\", \"per_block\", \"from_arg\", got " + kind.raw().dump());
  }
  return model;
}

std::regex compile(const Value& match) {
  const std::string pattern = match.text();
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& error) {
    match.fail("invalid regex '" + pattern + "': " + error.what());
  }
}

// A number past which int64 nanoseconds overflow; durations saturate there.
constexpr double kMaxNs = 9.2e18;

}  // namespace

KernelCatalog::KernelCatalog() : rng_(seed_) {}

void KernelCatalog::add_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw CatalogError("cannot read kernel catalog '" + path.string() + "': no such file");
  }
  std::ifstream in(path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad() || !in.is_open()) {
    throw CatalogError("cannot read kernel catalog '" + path.string() + "'");
  }
  add_json(text, path.string());
}

void KernelCatalog::add_json(std::string_view json_text, const std::string& source_name) {
  json document;
  try {
    document = json::parse(json_text);
  } catch (const json::parse_error& error) {
    std::string what = error.what();
    const std::size_t detail = what.find(": ");  // drop nlohmann's "[json.exception...] at line.."
    if (detail != std::string::npos) what = what.substr(detail + 2);
    throw CatalogError(syntax_location(json_text, error.byte, source_name) + ": " + what);
  } catch (const json::exception& error) {
    // Not a syntax error but a value nlohmann cannot hold (e.g. 1e999); it gives no position.
    std::string what = error.what();
    const std::size_t detail = what.find("] ");
    if (detail != std::string::npos) what = what.substr(detail + 2);
    throw CatalogError(source_name + ": " + what);
  }
  const Value root(source_name, "", document);
  if (!document.is_object()) {
    throw CatalogError(source_name + ": top level must be an object");
  }
  root.only_keys({"kernels", "default_us", "noise_cv", "seed"}, "");
  const Value kernels = root.member("kernels");
  if (!kernels.raw().is_array()) kernels.fail("must be an array");

  // Everything is checked before anything changes, so a bad file leaves the catalog as it was.
  std::vector<Entry> added;
  for (std::size_t i = 0; i < kernels.raw().size(); ++i) {
    const Value entry(source_name, "kernels[" + std::to_string(i) + "]", kernels.raw()[i]);
    entry.object();
    const Value match = entry.member("match");
    KernelModel model = read_model(entry);
    added.push_back(Entry{match.text(), compile(match), model});
  }
  const bool sets_default = document.contains("default_us");
  const bool sets_noise = document.contains("noise_cv");
  const bool sets_seed = document.contains("seed");
  const double default_us = sets_default ? root.member("default_us").non_negative() : default_us_;
  const double noise_cv = sets_noise ? root.member("noise_cv").non_negative() : noise_cv_;
  const std::uint64_t seed =
      sets_seed ? root.member("seed").unsigned_integer(std::numeric_limits<std::uint64_t>::max())
                : seed_;

  std::move(added.begin(), added.end(), std::back_inserter(entries_));
  default_us_ = default_us;
  noise_cv_ = noise_cv;
  if (sets_seed) {
    seed_ = seed;
    rng_.seed(seed_);
  }
}

KernelModel KernelCatalog::resolve(const std::string& kernel_name) const {
  for (const Entry& entry : entries_) {
    if (std::regex_search(kernel_name, entry.regex)) return entry.model;
  }
  return KernelModel{};
}

std::int64_t KernelCatalog::duration_ns(const KernelModel& model, const LaunchShape& shape) {
  double ns = default_us_ * 1e3;
  switch (model.kind) {
    case KernelModel::Kind::fixed:
      ns = model.us * 1e3;
      break;
    case KernelModel::Kind::per_block:
      ns = (model.base_us + model.per_block_us * static_cast<double>(shape.blocks)) * 1e3;
      break;
    case KernelModel::Kind::from_arg:
      if (shape.duration_arg) ns = static_cast<double>(*shape.duration_arg) * model.arg_unit_ns;
      break;
    case KernelModel::Kind::unknown:
      break;
  }
  if (noise_cv_ > 0) {
    // Lognormal with mean 1 and the requested coefficient of variation.
    const double sigma2 = std::log1p(noise_cv_ * noise_cv_);
    std::lognormal_distribution<double> factor(-sigma2 / 2, std::sqrt(sigma2));
    ns *= factor(rng_);
  }
  if (!(ns > 0)) return 0;
  if (ns >= kMaxNs) return static_cast<std::int64_t>(kMaxNs);
  return std::llround(ns);
}

}  // namespace gpuqos::simgpu
