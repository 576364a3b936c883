// Masked linears of the block, named and saved: the text key of a (layer, linear) pair, and 0/1
// masks written compactly into a method's JSON state (base64 of the bits, 8 entries per byte,
// entry i at bit i % 8 of byte i / 8), and handed between pipeline stages. Shared by the methods
// that own masks (sparse24, mst).
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include <vector>

#include "frugal/methods/method.h"
#include "frugal/model/gpt.h"

namespace frugal {

// "qkv", "proj", "fc", "gate", "fc_proj"
const char* linear_name(GPT::Linear which);
// "<layer>.<linear_name>", e.g. "3.fc_proj"
std::string linear_key(int layer, GPT::Linear which);

std::string encode_mask(std::span<const uint8_t> mask);
// Fills mask (its size fixes the entry count) from encode_mask's text; throws frugal::Error naming
// `what` (e.g. "the checkpoint's mst mask 3.fc") when the text does not fit or is not base64.
void decode_mask(const std::string& text, std::span<uint8_t> mask, const std::string& what);

// One block linear's mask, for share_masks.
struct BlockMask {
  int layer;
  std::vector<uint8_t>* mask;  // its size fixes the entry count
};
// Under a strategy whose ranks hold different blocks (TrainContext::share_blocks): every rank gets
// the masks of the blocks its model does not hold from the rank that holds them (which chose them
// from its weights and gradients). Nothing to do otherwise.
void share_masks(const TrainContext& ctx, std::span<const BlockMask> masks);

}  // namespace frugal
