// Filling masked positions with an encoder; see fill_mask.h.
#include "frugal/train/fill_mask.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "frugal/core/error.h"
#include "frugal/data/masking.h"
#include "frugal/io/stdout.h"

namespace frugal {

std::vector<int32_t> encode_with_masks(const data::Tokenizer& tokenizer, const std::string& text, int block_size) {
  const int32_t mask = data::encoder_masking(tokenizer).mask_id;
  std::vector<int32_t> ids;
  bool any = false;
  size_t begin = 0;
  for (;;) {
    const size_t at = text.find(data::kMaskToken, begin);
    const std::string piece = text.substr(begin, at == std::string::npos ? std::string::npos : at - begin);
    try {
      const std::vector<int32_t> encoded = tokenizer.encode(piece);
      ids.insert(ids.end(), encoded.begin(), encoded.end());
    } catch (const Error& e) {
      fail("the text cannot be encoded with this model's tokenizer: {}", e.what());
    }
    if (at == std::string::npos) break;
    ids.push_back(mask);
    any = true;
    begin = at + data::kMaskToken.size();
  }
  FRUGAL_CHECK(any, "the text has no {} to fill; write it where a token should be predicted, e.g. "
               "\"To be, or not to {}\"", data::kMaskToken, data::kMaskToken);
  FRUGAL_CHECK(int(ids.size()) <= block_size, "the text is {} tokens; this model reads at most {} "
               "(model.block_size): shorten it", ids.size(), block_size);
  return ids;
}

std::vector<MaskFill> fill_masks(GPT& model, const data::Tokenizer& tokenizer, const std::vector<int32_t>& ids, int top) {
  const ModelConfig& m = model.config();
  FRUGAL_CHECK(m.encoder(), "this model is a causal decoder (model.objective = \"causal\"): it "
               "continues text (frugal sample); filling <mask> needs an encoder trained with "
               "model.objective = \"mlm\"");
  const data::MaskingSpec spec = data::encoder_masking(tokenizer);
  FRUGAL_CHECK(m.vocab_size >= spec.vocab_size, "the model's vocabulary ({}) has no <mask> after the "
               "tokenizer's {} tokens: it was not trained as this tokenizer's encoder", m.vocab_size,
               tokenizer.vocab_size());
  FRUGAL_CHECK(top >= 1, "top = {} must be at least 1", top);
  const int T = static_cast<int>(ids.size()), V = m.vocab_size, Vt = tokenizer.vocab_size();
  std::vector<float> logits(size_t(T) * V);
  model.logits(ids.data(), 1, T, logits.data());
  std::vector<MaskFill> fills;
  for (int t = 0; t < T; ++t) {
    if (ids[size_t(t)] != spec.mask_id) continue;
    const float* row = logits.data() + size_t(t) * V;
    // The softmax over the tokenizer's tokens (the mask and padding rows are never an answer).
    const float mx = *std::max_element(row, row + Vt);
    double sum = 0;
    for (int v = 0; v < Vt; ++v) sum += std::exp(double(row[v]) - mx);
    std::vector<int32_t> order(static_cast<size_t>(Vt));
    std::iota(order.begin(), order.end(), 0);
    const int k = std::min(top, Vt);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    MaskFill fill{t, {}};
    for (int i = 0; i < k; ++i)
      fill.top.emplace_back(order[size_t(i)], float(std::exp(double(row[order[size_t(i)]]) - mx) / sum));
    fills.push_back(std::move(fill));
  }
  return fills;
}

void print_mask_fills(GPT& model, const data::Tokenizer& tokenizer, const std::string& text, int top) {
  std::vector<int32_t> ids = encode_with_masks(tokenizer, text, model.config().block_size);
  const std::vector<MaskFill> fills = fill_masks(model, tokenizer, ids, top);
  for (size_t i = 0; i < fills.size(); ++i) {
    io::print("<mask> {}:", i + 1);
    for (const auto& [token, p] : fills[i].top)
      io::print(" {} {:.3f}", data::quote_piece(tokenizer.piece(token)), p);
    io::print("\n");
    ids[size_t(fills[i].position)] = fills[i].top.front().first;
  }
  io::print("filled: {}\n", tokenizer.decode(ids));
}

}  // namespace frugal
