// Prompt -> hashed features (docs/design.md §5.6): unigrams and bigrams of
// token ids, or of words for text, counted. The keys of the two kinds are
// salted apart, so a predictor can never mix them up.
#include <algorithm>
#include <cctype>
#include <string>

#include "eldr/internal/vector_kernels.hpp"
#include "eldr/predictor.hpp"
#include "eldr/random.hpp"

namespace eldr {

const char* prompt_kind_name(PromptKind kind) noexcept {
  switch (kind) {
    case PromptKind::tokens:
      return "tokens";
    case PromptKind::text:
      return "text";
  }
  return "unknown";
}

namespace {

constexpr uint64_t kSalt[kPromptKinds] = {0x746f6b656e73ULL, 0x74657874ULL};

uint32_t unigram(PromptKind kind, uint64_t unit) noexcept {
  return static_cast<uint32_t>(splitmix64(unit ^ kSalt[static_cast<int>(kind)]));
}
uint32_t bigram(uint32_t a, uint32_t b) noexcept {
  return static_cast<uint32_t>(splitmix64((uint64_t{a} << 32 | b) + 0x62696772616dULL) >> 32);
}

// The length of the valid UTF-8 sequence at s[i] (1-4), or 0 when invalid
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t utf8_length(std::string_view s, size_t i) noexcept {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (n == 0 || c > 0xf4 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xc0) != 0x80) return 0;
  if (c == 0xe0 && b(1) < 0xa0) return 0;   // overlong
  if (c == 0xed && b(1) >= 0xa0) return 0;  // surrogates
  if (c == 0xf0 && b(1) < 0x90) return 0;   // overlong
  if (c == 0xf4 && b(1) >= 0x90) return 0;  // past U+10FFFF
  return n;
}

bool is_word_byte(unsigned char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// The code point of the valid UTF-8 sequence of n bytes at p.
uint32_t code_point(const char* p, size_t n) noexcept {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(p[k])); };
  if (n == 2) return (b(0) & 0x1f) << 6 | (b(1) & 0x3f);
  if (n == 3) return (b(0) & 0x0f) << 12 | (b(1) & 0x3f) << 6 | (b(2) & 0x3f);
  return (b(0) & 0x07) << 18 | (b(1) & 0x3f) << 12 | (b(2) & 0x3f) << 6 | (b(3) & 0x3f);
}

// The units of a text: words, and every other non-space code point on its
// own. A word is a run of ASCII letters, digits and '_' (lower-cased) and of
// the letters of the alphabetic scripts below U+2000 (accented Latin, Greek,
// Cyrillic, ...). CJK and the symbols above have no spaces to split on, so
// each is a unit and the bigrams make its words; ASCII punctuation is a
// signal of its own (code, math). Each unit is hashed.
Status text_units(std::string_view s, std::vector<uint64_t>& units) {
  units.clear();
  std::string word;
  auto flush = [&]() {
    if (!word.empty()) units.push_back(kernels::xxh3_64(word.data(), word.size()));
    word.clear();
  };
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (is_word_byte(c)) {
      if (word.size() < 64) word.push_back(static_cast<char>(std::tolower(c)));
      ++i;
      continue;
    }
    const size_t n = utf8_length(s, i);
    if (n == 0)
      return {Errc::invalid_argument,
              "the prompt text is not valid UTF-8 (byte " + std::to_string(i) + ")"};
    if (n > 1 && code_point(s.data() + i, n) < 0x2000) {
      if (word.size() < 64) word.append(s.data() + i, n);
      i += n;
      continue;
    }
    flush();
    if (!(n == 1 && (c == ' ' || c == '\n' || c == '\t' || c == '\r')))
      units.push_back(kernels::xxh3_64(s.data() + i, n) ^ 0x636f6465ULL);
    i += n;
  }
  flush();
  return {};
}

thread_local std::vector<uint64_t> t_units;
thread_local std::vector<uint32_t> t_keys;

}  // namespace

Status extract_features(const Prompt& prompt, PromptFeatures& out) {
  out.kind = prompt.kind;
  out.keys.clear();
  out.counts.clear();
  std::vector<uint64_t>& units = t_units;
  if (prompt.kind == PromptKind::tokens) {
    if (!prompt.text.empty()) return {Errc::invalid_argument, "a token prompt carries no text"};
    if (prompt.tokens.empty()) return {Errc::invalid_argument, "the prompt has no tokens"};
    if (prompt.tokens.size() > kMaxPromptTokens)
      return {Errc::invalid_argument, "the prompt has " + std::to_string(prompt.tokens.size()) +
                                          " tokens, more than " + std::to_string(kMaxPromptTokens)};
    const auto bad = std::find_if(prompt.tokens.begin(), prompt.tokens.end(),
                                  [](uint32_t t) { return t >= kMaxVocabulary; });
    if (bad != prompt.tokens.end())
      return {Errc::invalid_argument, "token id " + std::to_string(*bad) + " at position " +
                                          std::to_string(bad - prompt.tokens.begin()) +
                                          " is past the vocabulary limit 2^20"};
    units.assign(prompt.tokens.begin(), prompt.tokens.end());
  } else if (prompt.kind == PromptKind::text) {
    if (!prompt.tokens.empty()) return {Errc::invalid_argument, "a text prompt carries no tokens"};
    if (prompt.text.size() > kMaxPromptBytes)
      return {Errc::invalid_argument, "the prompt text has " + std::to_string(prompt.text.size()) +
                                          " bytes, more than " + std::to_string(kMaxPromptBytes)};
    ELDR_TRY(text_units(prompt.text, units));
    if (units.empty()) return {Errc::invalid_argument, "the prompt text has no words"};
  } else {
    return {Errc::invalid_argument, "unknown prompt kind"};
  }
  // Head and tail of a long prompt; a bigram never spans the cut.
  std::vector<uint32_t>& keys = t_keys;
  keys.clear();
  const size_t n = units.size();
  auto add_range = [&](size_t from, size_t to) {
    uint32_t prev = 0;
    for (size_t i = from; i < to; ++i) {
      const uint32_t u = unigram(prompt.kind, units[i]);
      keys.push_back(u);
      if (i > from) keys.push_back(bigram(prev, u));
      prev = u;
    }
  };
  if (n <= size_t{kFeatureHead} + kFeatureTail) {
    add_range(0, n);
  } else {
    add_range(0, kFeatureHead);
    add_range(n - kFeatureTail, n);
  }
  // Count unique keys in a small open-addressing table (L1-resident; a
  // sort would cost more than the rest of the prediction).
  struct Slot {
    uint32_t key, count, stamp;
  };
  thread_local std::vector<Slot> table;
  thread_local uint32_t stamp = 0;
  size_t cap = 64;
  while (cap < keys.size() * 2) cap *= 2;
  if (table.size() < cap) {
    table.assign(cap, Slot{0, 0, 0});
    stamp = 0;
  }
  if (++stamp == 0) {  // the stamp wrapped: clear once
    std::fill(table.begin(), table.end(), Slot{0, 0, 0});
    stamp = 1;
  }
  const size_t mask = cap - 1;
  for (const uint32_t k : keys) {
    size_t i = (k * 0x9e3779b1u) & mask;
    while (table[i].stamp == stamp && table[i].key != k) i = (i + 1) & mask;
    if (table[i].stamp != stamp) {
      table[i] = {k, 0, stamp};
      out.keys.push_back(k);
    }
    ++table[i].count;
  }
  out.counts.resize(out.keys.size());
  for (size_t j = 0; j < out.keys.size(); ++j) {
    size_t i = (out.keys[j] * 0x9e3779b1u) & mask;
    while (table[i].key != out.keys[j] || table[i].stamp != stamp) i = (i + 1) & mask;
    out.counts[j] = static_cast<uint16_t>(std::min<uint32_t>(table[i].count, 65535));
  }
  return {};
}

}  // namespace eldr
