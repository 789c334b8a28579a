// The footprint predictor: features, fit, predict, confidence, learning,
// the file form and bad input.
#include "eldr/predictor.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "eldr/cluster_table.hpp"
#include "eldr/router.hpp"
#include "test_tables.hpp"

namespace eldr {
namespace {

// Geometry L=2, E=4, k=1: a request of domain d uses expert d in both layers.
const Geometry kG{2, 4, 1};

std::vector<int16_t> domain_footprint(uint32_t d, int16_t tokens = 10) {
  std::vector<int16_t> f(8, 0);
  f[d] = tokens;
  f[4 + d] = tokens;
  return f;
}

// A prompt of domain d: a shared system prompt, then words of the domain and
// general words.
std::string domain_text(uint32_t d, uint32_t variant) {
  static const char* kWords[4][4] = {{"integral", "derivative", "matrix", "theorem"},
                                     {"function", "compile", "pointer", "class"},
                                     {"court", "statute", "contract", "plaintiff"},
                                     {"patient", "dose", "symptom", "diagnosis"}};
  std::string s = "You are a helpful assistant. Answer the question. ";
  for (uint32_t i = 0; i < 6; ++i) s += std::string(kWords[d][(i + variant) % 4]) + " ";
  s += "please and thank you " + std::to_string(variant);
  return s;
}

std::vector<uint32_t> domain_tokens(uint32_t d, uint32_t variant) {
  std::vector<uint32_t> t{1, 2, 3, 4, 5};  // boilerplate
  for (uint32_t i = 0; i < 8; ++i) t.push_back(100 * (d + 1) + (i * 7 + variant) % 10);
  t.push_back(9000 + variant);  // noise
  return t;
}

std::shared_ptr<Predictor> fit_text(uint32_t per_domain = 6) {
  std::vector<std::string> texts;
  std::vector<int16_t> fps;
  for (uint32_t d = 0; d < 4; ++d)
    for (uint32_t v = 0; v < per_domain; ++v) {
      texts.push_back(domain_text(d, v));
      auto f = domain_footprint(d);
      fps.insert(fps.end(), f.begin(), f.end());
    }
  std::vector<Prompt> prompts;
  for (const auto& t : texts) prompts.push_back(Prompt::of_text(t));
  auto p = Predictor::fit(kG, prompts, fps);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return *p;
}

// The expert with the largest predicted count in layer 0.
uint32_t top_expert(const std::vector<int16_t>& c) {
  return static_cast<uint32_t>(std::max_element(c.begin(), c.begin() + 4) - c.begin());
}

TEST(PromptFeatures, TokensAndTextAreValidated) {
  PromptFeatures f;
  EXPECT_EQ(extract_features(Prompt::of_tokens({}), f).code(), Errc::invalid_argument);
  const std::vector<uint32_t> past{1, kMaxVocabulary};
  EXPECT_EQ(extract_features(Prompt::of_tokens(past), f).code(), Errc::invalid_argument);
  EXPECT_EQ(extract_features(Prompt::of_text(""), f).code(), Errc::invalid_argument);
  EXPECT_EQ(extract_features(Prompt::of_text("   \n"), f).code(), Errc::invalid_argument);
  EXPECT_EQ(extract_features(Prompt::of_text("abc \xff def"), f).code(), Errc::invalid_argument);
  EXPECT_EQ(extract_features(Prompt::of_text("over\xc0\xaflong"), f).code(),
            Errc::invalid_argument);
  EXPECT_EQ(extract_features(Prompt::of_text(std::string(kMaxPromptBytes + 1, 'a')), f).code(),
            Errc::invalid_argument);
  std::vector<uint32_t> too_long(kMaxPromptTokens + 1, 7);
  EXPECT_EQ(extract_features(Prompt::of_tokens(too_long), f).code(), Errc::invalid_argument);
  ASSERT_TRUE(extract_features(Prompt::of_text("Héllo, 世界! hello"), f).is_ok());
  // "hello" twice (case folded), its bigrams, the punctuation and CJK units.
  uint32_t total = 0;
  for (auto c : f.counts) total += c;
  EXPECT_EQ(total, 6u + 5u);  // 6 units, 5 bigrams
}

TEST(PromptFeatures, LongPromptsAreReadAtHeadAndTail) {
  std::vector<uint32_t> t(100000);
  for (uint32_t i = 0; i < t.size(); ++i) t[i] = i;
  PromptFeatures f;
  ASSERT_TRUE(extract_features(Prompt::of_tokens(t), f).is_ok());
  EXPECT_EQ(f.keys.size(), size_t{2} * (kFeatureHead + kFeatureTail) - 2);
  // Same head and tail, different middle: same features.
  std::vector<uint32_t> u = t;
  u[50000] = 12345;
  PromptFeatures g;
  ASSERT_TRUE(extract_features(Prompt::of_tokens(u), g).is_ok());
  EXPECT_EQ(f.keys, g.keys);
}

TEST(Predictor, PredictsTheDomainFromText) {
  auto p = fit_text();
  std::vector<int16_t> c(8);
  for (uint32_t d = 0; d < 4; ++d) {
    auto r = p->predict(Prompt::of_text(domain_text(d, 17)), c);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(top_expert(c), d);
    EXPECT_GT(r->confidence, 0.5f);
    // Each layer sums to about top_k * kPredictedTokens.
    EXPECT_NEAR(c[0] + c[1] + c[2] + c[3], 1024, 4);
  }
  // Tokens: the predictor was fitted on text only.
  const std::vector<uint32_t> ids{1, 2, 3};
  EXPECT_EQ(p->predict(Prompt::of_tokens(ids), c).status().code(), Errc::unsupported);
}

TEST(Predictor, AnUnfamiliarPromptIsUnsureAndPredictsTheAverage) {
  auto p = fit_text();
  std::vector<int16_t> c(8);
  auto r = p->predict(Prompt::of_text("zebra quantum violin marmalade"), c);
  ASSERT_TRUE(r.is_ok());
  EXPECT_LT(r->confidence, 0.2f);
  // Close to uniform over the four domains.
  for (int e = 0; e < 4; ++e) EXPECT_NEAR(c[e], 256, 60) << e;
}

TEST(Predictor, PredictsFromTokenIds) {
  std::vector<Prompt> prompts;
  std::vector<std::vector<uint32_t>> ids;
  std::vector<int16_t> fps;
  for (uint32_t d = 0; d < 4; ++d)
    for (uint32_t v = 0; v < 5; ++v) {
      ids.push_back(domain_tokens(d, v));
      auto f = domain_footprint(d);
      fps.insert(fps.end(), f.begin(), f.end());
    }
  for (const auto& t : ids) prompts.push_back(Prompt::of_tokens(t));
  auto p = Predictor::fit(kG, prompts, fps);
  ASSERT_TRUE(p.is_ok());
  std::vector<int16_t> c(8);
  for (uint32_t d = 0; d < 4; ++d) {
    ASSERT_TRUE((*p)->predict(Prompt::of_tokens(domain_tokens(d, 8)), c).is_ok());
    EXPECT_EQ(top_expert(c), d);
  }
}

TEST(Predictor, LearnsANewDomainOnline) {
  // Calibrated on domains 0-2 only; domain 3's words are unknown.
  std::vector<std::string> texts;
  std::vector<int16_t> fps;
  for (uint32_t d = 0; d < 3; ++d)
    for (uint32_t v = 0; v < 6; ++v) {
      texts.push_back(domain_text(d, v));
      auto f = domain_footprint(d);
      fps.insert(fps.end(), f.begin(), f.end());
    }
  std::vector<Prompt> prompts;
  for (const auto& t : texts) prompts.push_back(Prompt::of_text(t));
  auto fitted = Predictor::fit(kG, prompts, fps);
  ASSERT_TRUE(fitted.is_ok());
  auto p = *fitted;
  std::vector<int16_t> c(8);
  auto before = p->predict(Prompt::of_text(domain_text(3, 30)), c);
  ASSERT_TRUE(before.is_ok());
  EXPECT_NE(top_expert(c), 3u);
  for (uint32_t v = 0; v < 8; ++v) {
    PromptFeatures f;
    ASSERT_TRUE(extract_features(Prompt::of_text(domain_text(3, v)), f).is_ok());
    ASSERT_TRUE(p->learn(f, domain_footprint(3)).is_ok());
  }
  p->flush();
  auto after = p->predict(Prompt::of_text(domain_text(3, 30)), c);
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(top_expert(c), 3u);
  EXPECT_GT(after->confidence, before->confidence);
  EXPECT_EQ(p->info().prototypes, 26u);
}

TEST(Predictor, CapacityBoundsThePrototypes) {
  auto p = Predictor::create(kG, {.capacity = 5});
  ASSERT_TRUE(p.is_ok());
  for (uint32_t v = 0; v < 40; ++v) {
    PromptFeatures f;
    ASSERT_TRUE(extract_features(Prompt::of_text(domain_text(v % 4, v)), f).is_ok());
    ASSERT_TRUE((*p)->learn(f, domain_footprint(v % 4)).is_ok());
  }
  EXPECT_EQ((*p)->info().prototypes, 5u);
  EXPECT_EQ((*p)->info().learned, 40u);
}

TEST(Predictor, RoundTripsThroughTheTableFile) {
  ClusterTable t = testing::axis_table();
  t.predictor = fit_text();
  const auto bytes = encode_table(t);
  auto back = decode_table(bytes);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_TRUE(back->predictor);
  std::vector<int16_t> a(8), b(8);
  const std::string q = domain_text(2, 11);
  auto pa = t.predictor->predict(Prompt::of_text(q), a);
  auto pb = back->predictor->predict(Prompt::of_text(q), b);
  ASSERT_TRUE(pa.is_ok() && pb.is_ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(pa->confidence, pb->confidence);
  EXPECT_EQ(back->predictor->encode(), t.predictor->encode());
}

TEST(Predictor, RefusesAnotherGeometryAndCorruptBytes) {
  auto p = fit_text();
  const auto bytes = p->encode();
  EXPECT_EQ(Predictor::decode({3, 4, 1}, bytes).status().code(), Errc::shape_mismatch);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{20}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_FALSE(Predictor::decode(kG, {bytes.data(), cut}).is_ok()) << cut;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    auto bad = bytes;
    bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    auto r = Predictor::decode(kG, bad);  // must not crash; may decode
    if (r.is_ok()) {
      std::vector<int16_t> c(8);
      (void)(*r)->predict(Prompt::of_text("court statute"), c);
    }
  }
  // A table whose predictor has another geometry is refused.
  ClusterTable t = testing::axis_table();
  t.predictor = fit_text();
  t.geometry = {2, 4, 2};
  EXPECT_FALSE(t.validate().is_ok());
}

// The axis table with a text predictor, routed by the locality band alone
// (tau 0): a domain's prompt goes to its own worker, 100 + the domain.
auto text_router() {
  ClusterTable t = testing::axis_table();
  t.predictor = fit_text();
  return Router::create(std::make_shared<const ClusterTable>(std::move(t)),
                        {.policy = Policy::eldr, .tau = 0.0f});
}

TEST(RouterPrompt, RoutesFromThePromptAndLearns) {
  auto r = text_router();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  Router& router = **r;
  for (uint32_t d = 0; d < 4; ++d) {
    auto dec = router.route_prompt(Prompt::of_text(domain_text(d, 21)), {.request_id = d});
    ASSERT_TRUE(dec.is_ok()) << dec.status().to_string();
    EXPECT_EQ(dec->worker_id, static_cast<int32_t>(100 + d));
    EXPECT_GT(dec->confidence, 0.5f);
  }
  EXPECT_TRUE(router.learn(2, domain_footprint(2)).is_ok());
  EXPECT_EQ(router.learn(2, domain_footprint(2)).code(), Errc::not_found);  // learned once
  EXPECT_EQ(router.learn(99, domain_footprint(2)).code(), Errc::not_found);
  EXPECT_FALSE(router.learn(3, std::vector<int16_t>(3)).is_ok());  // bad footprint
  EXPECT_EQ(router.route_prompt(Prompt::of_text("\xff")).status().code(), Errc::invalid_argument);
  const RouterStats st = router.stats();
  EXPECT_EQ(st.prompts_routed, 4u);
  EXPECT_EQ(st.prompts_rejected, 1u);
  EXPECT_EQ(st.learned, 1u);
  EXPECT_EQ(st.learn_rejected, 3u);
  EXPECT_TRUE(router.complete_request(0).is_ok());
}

TEST(RouterPrompt, ChoosesOnlyAmongTheGivenWorkers) {
  auto r = text_router();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  Router& router = **r;
  const std::string text = domain_text(1, 21);  // the prompt is a view of it
  const Prompt p = Prompt::of_text(text);
  EXPECT_EQ(router.route_prompt(p)->worker_id, 101);  // its own worker, when it may
  const std::vector<int32_t> others{100, 103, 999};   // 999: unknown, skipped
  for (int i = 0; i < 8; ++i) {
    auto d = router.route_prompt(p, {.workers = others});
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_TRUE(d->worker_id == 100 || d->worker_id == 103) << d->worker_id;
  }
  ASSERT_TRUE(router.drain_worker(102).is_ok());
  const std::vector<int32_t> gone{102, 999};  // draining and unknown: none left
  EXPECT_EQ(router.route_prompt(p, {.workers = gone}).status().code(), Errc::no_worker);
  EXPECT_EQ(router.stats().rejected, 1u);
}

TEST(RouterPrompt, ATableWithoutAPredictorSaysSo) {
  auto r = Router::create(std::make_shared<const ClusterTable>(testing::axis_table()));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ((*r)->route_prompt(Prompt::of_text("hello")).status().code(), Errc::unsupported);
  EXPECT_EQ((*r)->stats().prompts_rejected, 1u);
}

}  // namespace
}  // namespace eldr
