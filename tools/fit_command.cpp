// eldr fit | inspect | import | synth
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "commands.hpp"
#include "eldr/fit.hpp"
#include "eldr/lab/synthetic.hpp"
#include "eldr/npy.hpp"

namespace eldr::cli {

namespace {

struct FitArgs {
  std::string prefill, decode, labels, out, model;
  uint32_t workers = 0, top_k = 0, pairs = 30000, max_iterations = 50, threads = 0;
  uint64_t seed = 1;
  float tau = kDefaultTau;
  bool no_layer_select = false, plain_kmeans = false;
  std::string align;
};

int run_fit(const FitArgs& a) {
  auto prefill = load_counts_npy(a.prefill);
  if (!prefill) return report(prefill.status());
  CountsTensor decode;
  if (!a.decode.empty()) {
    auto d = load_counts_npy(a.decode);
    if (!d) return report(d.status());
    decode = std::move(*d);
    if (decode.n != prefill->n || decode.layers != prefill->layers ||
        decode.experts != prefill->experts)
      return report({Errc::shape_mismatch,
                     "decode counts " + a.decode + " do not have the prefill counts' shape"});
  }
  std::vector<std::string> labels;
  if (!a.labels.empty()) {
    auto l = load_labels(a.labels);
    if (!l) return report(l.status());
    labels = std::move(*l);
  }
  Geometry g{prefill->layers, prefill->experts, a.top_k};
  if (a.top_k == 0)
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
  auto* fit = app.add_subcommand("fit", "calibration footprints (.npy) -> cluster table");
  fit->add_option("--prefill", fa->prefill, "prefill counts [N,L,E] .npy")
      ->required()
      ->check(CLI::ExistingFile);
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
  fit->callback([fa] { g_exit_code = run_fit(*fa); });

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
