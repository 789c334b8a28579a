#include "calibration_records.hpp"

#include <nlohmann/json.hpp>

#include "eldr/lab/text_file.hpp"
#include "eldr/routed_experts.hpp"

namespace eldr::cli {

namespace {

using nlohmann::json;

// The JSON objects of a JSON-lines file, each with where it came from.
template <class F>
Status for_each_line(const std::string& path, F&& f) {
  auto data = read_text_file(path);
  if (!data) return data.status();
  size_t pos = 0, line_no = 0;
  while (pos < data->size()) {
    size_t end = data->find('\n', pos);
    if (end == std::string::npos) end = data->size();
    const std::string_view line(data->data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return {Errc::corrupt, where + ": not a JSON object"};
    ELDR_TRY(f(j, where));
  }
  return {};
}

const json* find(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool all_ints(const json& a) {
  if (!a.is_array() || a.empty()) return false;
  for (const auto& v : a)
    if (!v.is_number_integer()) return false;
  return true;
}

// One record's prompt into out (appended).
Status take_prompt(const json& j, PromptInput input, const std::string& where,
                   CalibrationPrompts& out) {
  const json* ids = nullptr;
  for (const char* key : {"token_ids", "input_ids", "prompt_token_ids"})
    if (!ids) ids = find(j, key);
  const json* prompt = find(j, "prompt");
  if (!ids && prompt && all_ints(*prompt)) ids = prompt;
  const json* text = find(j, "text");
  if (!text && prompt && (prompt->is_string() || prompt->is_array()) && prompt != ids)
    text = prompt;
  const bool use_ids = input == PromptInput::tokens || (input == PromptInput::automatic && ids);
  std::vector<uint32_t> tokens;
  std::string s;
  if (use_ids) {
    if (!ids || !all_ints(*ids)) return {Errc::corrupt, where + ": no token ids"};
    for (const auto& v : *ids) {
      const int64_t t = v.get<int64_t>();
      if (t < 0 || t >= int64_t{kMaxVocabulary})
        return {Errc::out_of_range,
                where + ": token id " + std::to_string(t) + " is outside [0, 2^20)"};
      tokens.push_back(static_cast<uint32_t>(t));
    }
  } else {
    if (!text) return {Errc::corrupt, where + ": no prompt text (\"text\" or \"prompt\")"};
    if (text->is_string()) {
      s = text->get<std::string>();
    } else {
      for (const auto& v : *text) {  // token strings: their concatenation
        if (!v.is_string()) return {Errc::corrupt, where + ": a prompt piece is not a string"};
        s += v.get_ref<const std::string&>();
      }
    }
    if (s.empty()) return {Errc::corrupt, where + ": empty prompt"};
  }
  out.tokens.push_back(std::move(tokens));
  out.texts.push_back(std::move(s));
  return {};
}

Result<uint64_t> prompt_rows(const json& j, const json* counted, const std::string& where) {
  if (counted && counted->is_number_unsigned()) return counted->get<uint64_t>();
  if (const json* ids = find(j, "prompt_token_ids"); ids && ids->is_array()) return ids->size();
  return Status{Errc::corrupt, where + ": the prompt's row count is unknown (prompt_tokens)"};
}

// One record's footprint: explicit counts, or a payload decoded.
Status take_footprint(const json& j, const PayloadGeometry& pg, const std::string& where,
                      CalibrationRecords& out) {
  std::vector<int16_t> fp;
  Geometry g;
  if (const json* f = find(j, "footprint")) {
    if (!f->is_array() || f->empty() || !(*f)[0].is_array())
      return {Errc::corrupt, where + ": footprint is not [layers][experts]"};
    g.layers = static_cast<uint32_t>(f->size());
    g.experts = static_cast<uint32_t>((*f)[0].size());
    for (const auto& row : *f) {
      if (!row.is_array() || row.size() != g.experts)
        return {Errc::corrupt, where + ": footprint rows differ in length"};
      for (const auto& v : row) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 32767)
          return {Errc::corrupt, where + ": a footprint count is not in [0, 32767]"};
        fp.push_back(static_cast<int16_t>(v.get<int64_t>()));
      }
    }
  } else {
    if (pg.experts == 0)
      return {Errc::invalid_argument, where + ": routed-expert payloads need --experts"};
    RoutedExpertsOptions o;
    o.num_experts = pg.experts;
    o.moe_layers = pg.moe_layers;
    const json* meta = find(j, "meta_info");
    const json* choices = find(j, "choices");
    const json* vllm = choices && choices->is_array() && !choices->empty()
                           ? find((*choices)[0], "routed_experts")
                           : nullptr;
    Result<RoutedExpertsInfo> info = Status{Errc::corrupt, where +
                                                               ": no footprint, "
                                                               "meta_info.routed_experts or "
                                                               "choices[0].routed_experts"};
    if (meta && find(*meta, "routed_experts")) {  // SGLang
      const json* payload = find(*meta, "routed_experts");
      if (!payload->is_string()) return {Errc::corrupt, where + ": routed_experts is not base64"};
      auto dtype = parse_id_dtype(meta->value("routed_experts_dtype", "int32"));
      if (!dtype) return {Errc::corrupt, where + ": " + dtype.status().message()};
      auto rows = prompt_rows(j, find(*meta, "prompt_tokens"), where);
      if (!rows) return rows.status();
      if (pg.hidden_layers == 0 || pg.top_k == 0)
        return {Errc::invalid_argument, where + ": SGLang payloads need --layers and --top-k"};
      o.num_hidden_layers = pg.hidden_layers;
      o.top_k = pg.top_k;
      o.row_count = *rows;
      g = {footprint_layers(o, pg.hidden_layers), pg.experts, pg.top_k};
      fp.assign(g.cells(), 0);
      info = footprint_from_base64_ids(payload->get_ref<const std::string&>(), *dtype, o, fp);
    } else if (vllm && vllm->is_string()) {  // vLLM: a base64 .npy
      const json* usage = find(j, "usage");
      auto rows = prompt_rows(j, usage ? find(*usage, "prompt_tokens") : nullptr, where);
      if (!rows) return rows.status();
      o.row_count = *rows;
      // The .npy gives its layer and top-k axes.
      const std::string& b64 = vllm->get_ref<const std::string&>();
      auto shape = base64_npy_shape(b64);
      if (!shape) return {shape.status().code(), where + ": " + shape.status().message()};
      g = {footprint_layers(o, shape->num_hidden_layers), pg.experts, shape->top_k};
      fp.assign(g.cells(), 0);
      info = footprint_from_base64_npy(b64, o, fp);
    }
    if (!info) return {info.status().code(), where + ": " + info.status().message()};
  }
  if (out.geometry.layers == 0) {
    out.geometry = g;
  } else if (g.layers != out.geometry.layers || g.experts != out.geometry.experts) {
    return {Errc::shape_mismatch, where + ": footprint " + g.to_string() + ", earlier records " +
                                      out.geometry.to_string()};
  }
  out.footprints.insert(out.footprints.end(), fp.begin(), fp.end());
  return {};
}

}  // namespace

std::vector<Prompt> CalibrationPrompts::views() const {
  std::vector<Prompt> out;
  for (size_t i = 0; i < texts.size(); ++i)
    out.push_back(tokens[i].empty() ? Prompt::of_text(texts[i]) : Prompt::of_tokens(tokens[i]));
  return out;
}

Result<CalibrationPrompts> read_prompts(const std::string& path, PromptInput input) {
  CalibrationPrompts out;
  ELDR_TRY(for_each_line(path, [&](const json& j, const std::string& where) {
    return take_prompt(j, input, where, out);
  }));
  return out;
}

Result<CalibrationRecords> read_records(const std::string& path, PromptInput input,
                                        const PayloadGeometry& payload) {
  CalibrationRecords out;
  ELDR_TRY(for_each_line(path, [&](const json& j, const std::string& where) -> Status {
    if (Status s = take_footprint(j, payload, where, out); !s) return s;
    return take_prompt(j, input, where, out.prompts);
  }));
  if (out.size() == 0) return Status{Errc::invalid_argument, path + ": no records"};
  return out;
}

}  // namespace eldr::cli
