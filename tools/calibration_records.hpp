// What `eldr fit` reads besides .npy footprints: prompts for the predictor,
// and calibration records that carry a prompt beside its footprint or a
// stock engine's routed-expert payload (docs/design.md §5.6).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "eldr/geometry.hpp"
#include "eldr/predictor.hpp"
#include "eldr/status.hpp"

namespace eldr::cli {

// Which input of a record becomes its prompt: token ids ("token_ids",
// "input_ids", "prompt_token_ids", or "prompt" as a list of ints) or text
// ("text", "prompt" as a string, or "prompt" as a list of token strings,
// joined); automatic: token ids when the record has them, else text.
enum class PromptInput { automatic, tokens, text };

struct CalibrationPrompts {
  std::vector<std::vector<uint32_t>> tokens;  // per record, empty when text
  std::vector<std::string> texts;             // per record, empty when tokens
  std::vector<Prompt> views() const;          // borrows from this
};

// --prompts: one JSON object per line (gzip or plain), line i the prompt of
// footprint row i.
Result<CalibrationPrompts> read_prompts(const std::string& path, PromptInput input);

// The payload decoders' geometry (records with engine payloads).
struct PayloadGeometry {
  uint32_t experts = 0;              // E
  uint32_t hidden_layers = 0;        // SGLang's raw ids: the payload's layer axis
  uint32_t top_k = 0;                // SGLang's raw ids: the payload's top-k axis
  std::vector<uint32_t> moe_layers;  // empty: every hidden layer
};

// --records: one JSON object per line, a prompt (as read_prompts) and its
// prefill footprint: "footprint" ([L][E] counts), an SGLang response's
// "meta_info" (routed_experts, routed_experts_dtype, prompt_tokens) or a vLLM
// response's "choices"[0]."routed_experts" (its prompt rows:
// "usage"."prompt_tokens" or the length of "prompt_token_ids").
struct CalibrationRecords {
  Geometry geometry;                // top_k 0: unknown (from the caller's --top-k / --model)
  std::vector<int16_t> footprints;  // [n][L][E]
  CalibrationPrompts prompts;
  uint64_t size() const noexcept { return prompts.texts.size(); }
};
Result<CalibrationRecords> read_records(const std::string& path, PromptInput input,
                                        const PayloadGeometry& payload);

}  // namespace eldr::cli
