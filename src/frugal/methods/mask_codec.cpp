// Linear keys and mask text for method states; see mask_codec.h.
#include "frugal/methods/mask_codec.h"

#include <fmt/format.h>

#include <vector>

#include "frugal/core/error.h"

namespace frugal {

const char* linear_name(GPT::Linear which) {
  switch (which) {
    case GPT::Linear::Qkv: return "qkv";
    case GPT::Linear::Proj: return "proj";
    case GPT::Linear::Fc: return "fc";
    case GPT::Linear::Gate: return "gate";
    case GPT::Linear::FcProj: return "fc_proj";
  }
  return "?";
}

std::string linear_key(int layer, GPT::Linear which) { return fmt::format("{}.{}", layer, linear_name(which)); }

namespace {
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

std::string encode_mask(std::span<const uint8_t> mask) {
  std::vector<uint8_t> bytes((mask.size() + 7) / 8, 0);
  for (size_t i = 0; i < mask.size(); ++i) bytes[i / 8] |= static_cast<uint8_t>((mask[i] != 0) << (i % 8));
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (i + k < bytes.size() ? bytes[i + k] : 0u);
    const size_t chars = std::min<size_t>(4, (bytes.size() - i) * 4 / 3 + 1);
    for (size_t k = 0; k < chars; ++k) out += kBase64[(v >> (18 - 6 * k)) & 63];
  }
  return out;
}

void decode_mask(const std::string& text, std::span<uint8_t> mask, const std::string& what) {
  const size_t n_bytes = (mask.size() + 7) / 8;
  FRUGAL_CHECK(text.size() == n_bytes / 3 * 4 + (n_bytes % 3 ? n_bytes % 3 + 1 : 0),
               "{} has {} characters, which does not fit the model's {} entries; resume with the "
               "model config the checkpoint was written with", what, text.size(), mask.size());
  std::vector<uint8_t> bytes(n_bytes, 0);
  for (size_t c = 0; c < text.size(); ++c) {
    const char* hit = std::char_traits<char>::find(kBase64, 64, text[c]);
    FRUGAL_CHECK(hit, "{} is not base64 (character {}); the checkpoint is damaged", what, c);
    const uint32_t six = static_cast<uint32_t>(hit - kBase64);
    const size_t bit = c * 6;  // six bits at bit offset `bit` of the big-endian byte stream
    for (size_t k = 0; k < 6 && (bit + k) / 8 < n_bytes; ++k)
      if (six >> (5 - k) & 1u) bytes[(bit + k) / 8] |= static_cast<uint8_t>(0x80u >> ((bit + k) % 8));
  }
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (bytes[i / 8] >> (i % 8)) & 1u;
}

void share_masks(const TrainContext& ctx, std::span<const BlockMask> masks) {
  if (!ctx.share_blocks) return;
  const BlockRange& held = ctx.model().range();
  std::vector<int> layers;
  std::vector<std::string> blobs;
  for (const BlockMask& b : masks) {
    layers.push_back(b.layer);
    blobs.push_back(held.contains(b.layer) ? encode_mask(*b.mask) : std::string());
  }
  ctx.share_blocks(layers, blobs);
  for (size_t i = 0; i < masks.size(); ++i)
    if (!held.contains(masks[i].layer))
      decode_mask(blobs[i], *masks[i].mask, fmt::format("the mask of block {} from the pipeline stage that holds it",
                                                        masks[i].layer));
}

}  // namespace frugal
