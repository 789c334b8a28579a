#include "eldr/geometry.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace eldr {

namespace {
constexpr std::array<ModelPreset, 4> kPresets{{
    {"qwen3-30b-a3b", {48, 128, 8}},
    {"gpt-oss-120b", {36, 128, 4}},
    {"gemma-4-26b-a4b", {30, 128, 8}},
    {"gpt-oss-20b", {24, 32, 4}},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}
}  // namespace

Status Geometry::validate() const {
  if (layers == 0 || layers > kMaxLayers)
    return {Errc::invalid_argument, "layers must be in [1, " + std::to_string(kMaxLayers) +
                                        "], got " + std::to_string(layers)};
  if (experts == 0 || experts > kMaxExperts)
    return {Errc::invalid_argument, "experts must be in [1, " + std::to_string(kMaxExperts) +
                                        "], got " + std::to_string(experts)};
  if (top_k > kMaxTopK || top_k > experts)
    return {Errc::invalid_argument, "top_k must be in [0, min(experts, " +
                                        std::to_string(kMaxTopK) + ")], got " +
                                        std::to_string(top_k)};
  return Status::ok();
}

std::string Geometry::to_string() const {
  return std::to_string(layers) + "x" + std::to_string(experts) + " k=" + std::to_string(top_k);
}

std::span<const ModelPreset> model_presets() noexcept { return kPresets; }

std::optional<Geometry> find_preset(std::string_view name) {
  std::string key = lower(name);
  if (auto slash = key.rfind('/'); slash != std::string::npos) key = key.substr(slash + 1);
  for (const auto& p : kPresets)
    if (key == p.name) return p.geometry;
  return std::nullopt;
}

}  // namespace eldr
