// Model geometry (L MoE layers, E experts per layer, top-k per token) and the
// presets of the models the method was published on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "eldr/status.hpp"

namespace eldr {

// Hard limits: keep every size computation far from overflow and reject
// absurd producer input early. int16 footprints and uint16 expert ids bound E.
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxExperts = 4096;
inline constexpr uint32_t kMaxTopK = 64;

struct Geometry {
  uint32_t layers = 0;   // L
  uint32_t experts = 0;  // E
  uint32_t top_k = 0;    // k; 0 = unknown (disables the per-layer sum check)

  size_t cells() const noexcept { return size_t{layers} * experts; }
  bool operator==(const Geometry&) const = default;
  Status validate() const;
  std::string to_string() const;  // "48x128 k=8"
};

struct ModelPreset {
  std::string_view name;
  Geometry geometry;
};

// Qwen3-30B-A3B, GPT-OSS-120B, Gemma-4-26B-A4B, GPT-OSS-20B.
std::span<const ModelPreset> model_presets() noexcept;
// Case-insensitive; accepts the preset name or a Hugging Face style id that
// ends with it ("Qwen/Qwen3-30B-A3B").
std::optional<Geometry> find_preset(std::string_view name);

}  // namespace eldr
