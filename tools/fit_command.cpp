// eldr fit | inspect | import | synth
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "calibration_records.hpp"
#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/sim.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/npy.hpp"

namespace eldr::cli {

namespace {

struct FitArgs {
  std::string prefill, decode, labels, out, model;
  // Prompts for the predictor: --prompts beside --prefill, or --records
  // (prompt + footprint or engine payload), or --trace (a trace directory
  // with its tokens.jsonl.gz).
  std::string prompts, records, trace;
  PromptInput prompt_input = PromptInput::automatic;
  PayloadGeometry payload;
  PredictorOptions predictor;
  uint32_t workers = 0, top_k = 0, pairs = 30000, max_iterations = 50, threads = 0;
  uint64_t seed = 1;
  float tau = kDefaultTau;
  bool no_layer_select = false, plain_kmeans = false;
  std::string align;
};

// The calibration footprints (and prompts, when given): from --prefill and
// --decode, --records, or --trace.
struct Calibration {
  CountsTensor prefill, decode;
  std::optional<CalibrationPrompts> prompts;
  std::vector<std::string> labels;
  uint32_t top_k = 0;  // known from records or a trace; 0: --top-k / --model
};

// A trace's decode counts: each request's per-token inclusion times its
// output tokens (what eldr sim calibrates layer selection on).
CountsTensor trace_decode_counts(const SimWorkload& w) {
  const size_t cells = w.geometry.cells();
  CountsTensor d{w.requests.size(), w.geometry.layers, w.geometry.experts,
                 std::vector<int16_t>(w.requests.size() * cells)};
  for (size_t r = 0; r < w.requests.size(); ++r)
    for (size_t c = 0; c < cells; ++c)
      d.data[r * cells + c] = static_cast<int16_t>(std::lround(
          std::min(32767.0, double{w.inclusion[size_t{w.requests[r].profile} * cells + c]} *
                                w.requests[r].output_tokens)));
  return d;
}

Result<Calibration> load_calibration(const FitArgs& a) {
  Calibration c;
  const int sources = !a.prefill.empty() + !a.records.empty() + !a.trace.empty();
  if (sources != 1)
    return Status{Errc::invalid_argument, "give exactly one of --prefill, --records, --trace"};
  if (!a.prefill.empty()) {
    auto prefill = load_counts_npy(a.prefill);
    if (!prefill) return prefill.status();
    c.prefill = std::move(*prefill);
  } else if (!a.records.empty()) {
    auto r = read_records(a.records, a.prompt_input, a.payload);
    if (!r) return r.status();
    c.prefill = {r->size(), r->geometry.layers, r->geometry.experts, std::move(r->footprints)};
    c.prompts = std::move(r->prompts);
    c.top_k = r->geometry.top_k;
  } else {
    // A trace: its first decode tokens stand in for the prefill footprint
    // (eldr sim's rule), its decode counts select layers, its labels and
    // tokens.jsonl.gz come along.
    const std::string dir = a.trace + "/";
    const std::string labels =
        std::filesystem::exists(dir + "labels.txt") ? dir + "labels.txt" : "";
    auto w = load_trace_workload(dir + "token_experts.npy", dir + "index.npy", labels);
    if (!w) return w.status();
    c.prefill = std::move(w->prefill);
    c.decode = trace_decode_counts(*w);
    c.top_k = w->geometry.top_k;
    for (const auto& r : w->requests) c.labels.push_back(w->domain_names[r.domain]);
    if (a.prompts.empty()) {
      auto p = read_prompts(dir + "tokens.jsonl.gz", a.prompt_input);
      if (!p) return p.status();
      c.prompts = std::move(*p);
    }
  }
  if (!a.prompts.empty()) {
    auto p = read_prompts(a.prompts, a.prompt_input);
    if (!p) return p.status();
    c.prompts = std::move(*p);
  }
  if (c.prompts && c.prompts->texts.size() != c.prefill.n)
    return Status{Errc::shape_mismatch, "the calibration has " + std::to_string(c.prefill.n) +
                                            " footprints and " +
                                            std::to_string(c.prompts->texts.size()) + " prompts"};
  if (!a.decode.empty()) {
    auto d = load_counts_npy(a.decode);
    if (!d) return d.status();
    c.decode = std::move(*d);
  }
  if (!c.decode.data.empty() && (c.decode.n != c.prefill.n || c.decode.layers != c.prefill.layers ||
                                 c.decode.experts != c.prefill.experts))
    return Status{Errc::shape_mismatch, "the decode counts do not have the prefill counts' shape"};
  return c;
}

void print_predictor(const Predictor& p, uint64_t skipped) {
  const PredictorInfo i = p.info();
  std::printf(
      "  predictor: %u prototypes (%s%s%s), %llu records skipped; memory %.1f MiB "
      "(demand %.1f, features %.1f, index %.1f)\n",
      i.prototypes, i.kinds & 1 ? "tokens" : "", i.kinds == 3 ? ", " : "",
      i.kinds & 2 ? "text" : "", static_cast<unsigned long long>(skipped),
      i.total_bytes() / 1048576.0, i.demand_bytes / 1048576.0, i.feature_bytes / 1048576.0,
      i.index_bytes / 1048576.0);
}

int run_fit(const FitArgs& a) {
  auto cal = load_calibration(a);
  if (!cal) return report(cal.status());
  CountsTensor* prefill = &cal->prefill;
  const CountsTensor& decode = cal->decode;
  std::vector<std::string> labels = std::move(cal->labels);
  if (!a.labels.empty()) {
    auto l = load_labels(a.labels);
    if (!l) return report(l.status());
    labels = std::move(*l);
  }
  Geometry g{prefill->layers, prefill->experts, a.top_k ? a.top_k : cal->top_k};
  if (g.top_k == 0)
    if (auto preset = find_preset(a.model);
        preset && preset->layers == g.layers && preset->experts == g.experts)
      g.top_k = preset->top_k;
  ClusterTable old;
  FitOptions o;
  if (!a.align.empty()) {
    auto t = load_any_table(a.align);
    if (!t) return report(t.status());
    old = std::move(*t);
    o.align_to = &old;
  }
  o.workers = a.workers;
  o.seed = a.seed;
  o.rho_pairs = a.pairs;
  o.select_layers = !a.no_layer_select;
  o.balanced = !a.plain_kmeans;
  o.max_iterations = a.max_iterations;
  o.default_tau = a.tau;
  o.model = a.model;
  o.threads = a.threads;
  ProgressBar bar;
  o.progress = [&bar](std::string_view stage, double f) { bar.update(stage, f); };
  const auto t0 = std::chrono::steady_clock::now();
  auto table = fit_table({g, prefill->n, prefill->data, decode.data, labels}, o);
  bar.finish();
  if (!table) return report(table.status());
  uint64_t skipped = 0;
  if (cal->prompts) {
    const std::vector<Prompt> prompts = cal->prompts->views();
    auto p = Predictor::fit(g, prompts, prefill->data, a.predictor, &skipped);
    if (!p) return report(p.status());
    table->predictor = std::move(*p);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (Status s = save_table(*table, a.out); !s) return report(s);

  std::printf("fitted %s in %.2f s\n", a.out.c_str(), secs);
  std::printf("  N %llu  K %u  geometry %s  seed %llu  iterations %u\n",
              static_cast<unsigned long long>(table->fit.n_requests), table->num_clusters(),
              g.to_string().c_str(), static_cast<unsigned long long>(a.seed),
              table->fit.iterations);
  std::printf("  layers (%zu):", table->layer_mask.size());
  for (uint32_t l : table->layer_mask) std::printf(" %u", l);
  if (table->fit.rho_curve.empty())
    std::printf("\n  peak rho: n/a (no decode counts: all layers)\n");
  else
    std::printf("\n  peak rho: %.4f (all layers: %.4f)\n", table->fit.peak_rho,
                table->fit.rho_curve.back());
  std::printf("  cluster sizes (cap %llu):",
              static_cast<unsigned long long>((table->fit.n_requests + table->num_clusters() - 1) /
                                              table->num_clusters()));
  for (uint32_t s : table->fit.cluster_sizes) std::printf(" %u", s);
  std::printf("\n");
  if (!table->domains.empty())
    std::printf("  domain pools: %zu labels\n", table->domains.names.size());
  if (table->predictor) print_predictor(*table->predictor, skipped);
  return 0;
}

nlohmann::json table_json(const ClusterTable& t) {
  nlohmann::json j;
  j["schema_version"] = t.schema_version;
  j["model"] = t.model;
  j["geometry"] = {
      {"layers", t.geometry.layers}, {"experts", t.geometry.experts}, {"top_k", t.geometry.top_k}};
  j["layer_mask"] = t.layer_mask;
  j["workers"] = t.num_clusters();
  j["worker_ids"] = t.worker_ids;
  j["default_tau"] = t.default_tau;
  j["fit"] = {{"n_requests", t.fit.n_requests},
              {"seed", t.fit.seed},
              {"peak_rho", t.fit.peak_rho},
              {"rho_curve", t.fit.rho_curve},
              {"calibration_hash", t.fit.calibration_hash},
              {"created_unix", t.fit.created_unix},
              {"iterations", t.fit.iterations},
              {"cluster_sizes", t.fit.cluster_sizes},
              {"source", t.fit.source}};
  if (!t.domains.empty())
    j["domains"] = {{"names", t.domains.names},
                    {"counts", t.domains.counts},
                    {"worker_domain", t.domains.worker_domain}};
  if (t.predictor) {
    const PredictorInfo i = t.predictor->info();
    std::vector<std::string> kinds;
    for (uint32_t k = 0; k < kPromptKinds; ++k)
      if (i.kinds & (1u << k)) kinds.push_back(prompt_kind_name(static_cast<PromptKind>(k)));
    j["predictor"] = {{"prototypes", i.prototypes},
                      {"kinds", kinds},
                      {"learned", i.learned},
                      {"demand_bytes", i.demand_bytes},
                      {"feature_bytes", i.feature_bytes},
                      {"index_bytes", i.index_bytes}};
  }
  return j;
}

int run_inspect(const std::string& path, bool json) {
  auto t = load_any_table(path);
  if (!t) return report(t.status());
  if (json) {
    std::printf("%s\n", table_json(*t).dump().c_str());
    return 0;
  }
  std::printf("%s\n", table_json(*t).dump(2).c_str());
  return 0;
}

struct SynthArgs {
  std::string preset = "task", model = "qwen3-30b-a3b", out_dir = ".";
  uint64_t requests = 1000, seed = 1;
};

int run_synth(const SynthArgs& a) {
  auto g = find_preset(a.model);
  if (!g) return report({Errc::invalid_argument, "unknown model preset '" + a.model + "'"});
  auto o = synthetic_preset(a.preset, *g, a.seed);
  if (!o) return report(o.status());
  auto w = generate_synthetic(*o, a.requests);
  if (!w) return report(w.status());
  std::filesystem::create_directories(a.out_dir);
  const std::string dir = a.out_dir + "/";
  if (Status s = save_counts_npy(dir + "prefill.npy", w->prefill); !s) return report(s);
  if (Status s = save_counts_npy(dir + "decode.npy", w->decode); !s) return report(s);
  std::ofstream labels(dir + "labels.txt");
  for (const auto& l : w->labels()) labels << l << '\n';
  if (!labels) return report({Errc::io, "cannot write " + dir + "labels.txt"});
  std::printf("wrote %llu requests (%s, %s) to %sprefill.npy, decode.npy, labels.txt\n",
              static_cast<unsigned long long>(a.requests), a.preset.c_str(), g->to_string().c_str(),
              dir.c_str());
  return 0;
}

}  // namespace

void register_fit_commands(CLI::App& app) {
  auto fa = std::make_shared<FitArgs>();
  auto* fit = app.add_subcommand(
      "fit", "calibration footprints (and prompts) -> cluster table (and footprint predictor)");
  fit->add_option("--prefill", fa->prefill, "prefill counts [N,L,E] .npy")
      ->check(CLI::ExistingFile);
  fit->add_option("--prompts", fa->prompts,
                  "JSON lines (gzip or plain), line i the prompt of footprint i: \"text\" or "
                  "\"prompt\" (a string, or token strings joined), or token ids (\"token_ids\", "
                  "\"input_ids\", \"prompt_token_ids\"); fits the footprint predictor")
      ->check(CLI::ExistingFile);
  fit->add_option("--records", fa->records,
                  "JSON lines, each a prompt (as --prompts) and its footprint: \"footprint\" "
                  "[L][E], an SGLang response's \"meta_info\" or a vLLM response's "
                  "\"choices\" with routed_experts (instead of --prefill)")
      ->check(CLI::ExistingFile);
  fit->add_option("--trace", fa->trace,
                  "a trace directory (token_experts.npy, index.npy, labels.txt, "
                  "tokens.jsonl.gz), as eldr sim reads it (instead of --prefill)")
      ->check(CLI::ExistingDirectory);
  fit->add_option("--prompt-input", fa->prompt_input,
                  "what a prompt is: auto (token ids when a record has them, else text), "
                  "tokens or text")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, PromptInput>{{"auto", PromptInput::automatic},
                                             {"tokens", PromptInput::tokens},
                                             {"text", PromptInput::text}}));
  fit->add_option("--experts", fa->payload.experts, "records' payloads: experts per layer E");
  fit->add_option("--layers", fa->payload.hidden_layers,
                  "records' SGLang payloads: the model's num_hidden_layers");
  fit->add_option("--moe-layers", fa->payload.moe_layers,
                  "records' payloads: the hidden layers that are MoE layers (default all)")
      ->delimiter(',');
  add_predictor_options(fit, &fa->predictor);
  fit->add_option("--decode", fa->decode, "decode counts [N,L,E] .npy (enables layer selection)")
      ->check(CLI::ExistingFile);
  fit->add_option("--labels", fa->labels, "labels: text (one per line) or integer .npy")
      ->check(CLI::ExistingFile);
  fit->add_option("--workers,-k", fa->workers, "decode workers K")
      ->required()
      ->check(CLI::Range(1u, 1024u));
  fit->add_option("--out,-o", fa->out, "cluster table to write")->required();
  fit->add_option("--model", fa->model, "model name (a preset name also fills top-k)");
  fit->add_option("--top-k", fa->top_k, "experts per token (0: from --model)");
  fit->add_option("--seed", fa->seed, "seed (pairs, k-means++)");
  fit->add_option("--pairs", fa->pairs, "random pairs for Spearman rho")
      ->check(CLI::Range(2u, 10000000u));
  fit->add_option("--max-iterations", fa->max_iterations)->check(CLI::Range(1u, 10000u));
  fit->add_option("--tau", fa->tau, "default locality band width stored in the table")
      ->check(CLI::Range(0.0f, 2.0f));
  fit->add_option("--threads", fa->threads, "0 = all cores");
  fit->add_option("--align-to", fa->align, "existing table: keep each worker's locality (refit)")
      ->check(CLI::ExistingFile);
  fit->add_flag("--no-layer-select", fa->no_layer_select, "use every layer");
  fit->add_flag("--plain-kmeans", fa->plain_kmeans, "unbalanced k-means (ablation)");
  fit->callback([fa] {
    fa->payload.top_k = fa->top_k;
    g_exit_code = run_fit(*fa);
  });

  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* inspect =
      app.add_subcommand("inspect", "print a cluster table (FlatBuffers or prototype JSON)");
  inspect->add_option("table", *path)->required()->check(CLI::ExistingFile);
  inspect->add_flag("--json", *json, "one JSON line");
  inspect->callback([path, json] { g_exit_code = run_inspect(*path, *json); });

  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto topk = std::make_shared<uint32_t>(0);
  auto* import = app.add_subcommand("import", "research prototype JSON -> cluster table");
  import->add_option("json", *in)->required()->check(CLI::ExistingFile);
  import->add_option("--out,-o", *out)->required();
  import->add_option("--top-k", *topk, "experts per token (0: from the model name)");
  import->callback([in, out, topk] {
    JsonImportOptions o;
  o.top_k = *topk;
  auto t = import_prototype_json_file(*in, o);
  if (!t) {
    g_exit_code = report(t.status());
    return;
  }
  g_exit_code = report(save_table(*t, *out));
  if (g_exit_code == 0)
    std::printf("imported %s: K %u, %zu layers, %s\n", out->c_str(), t->num_clusters(),
                t->layer_mask.size(), t->geometry.to_string().c_str());
});

auto sa = std::make_shared<SynthArgs>();
auto* synth = app.add_subcommand("synth", "write a synthetic calibration set (.npy + labels)");
synth->add_option("--preset", sa->preset, "task | language");
synth->add_option("--model", sa->model, "model preset for the geometry");
synth->add_option("--requests,-n", sa->requests)
    ->check(CLI::Range(uint64_t{2}, uint64_t{10000000}));
synth->add_option("--seed", sa->seed);
synth->add_option("--out-dir", sa->out_dir);
synth->callback([sa] { g_exit_code = run_synth(*sa); });
}  // namespace eldr::cli

}  // namespace eldr::cli
