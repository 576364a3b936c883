// Backend-neutral kernel declarations: the one place the model calls into compute.
//
// Conventions (hold for every kernel here and in ref/ and cpu/):
// - Row-major float32 tensors; shapes in the comments use B (batch), T (time), C (channels),
//   NH (heads), HS (head size), N = B*T (rows), OC (output channels), V (vocabulary),
//   Vp (padded vocabulary, a multiple of 64), H (MLP hidden width).
// - Linear weights are (OC, IC), as in PyTorch's nn.Linear: out = inp · Wᵀ + b.
// - Parameter gradients ACCUMULATE (+=) so micro-batch gradient accumulation works.
// - Activation gradients OVERWRITE (=), except where the input is the residual stream:
//   layernorm_backward and residual_backward ADD into their dinp.
// - Any gradient pointer may be null: that gradient is not computed (a frozen weight runs no
//   weight-gradient product; the first trainable layer needs no input gradient below it).
// - Token ids are int32; a target of -1 is ignored by the loss.
//
// Each section below is a kernel family named X (the name after "----"): its naive reference is
// kernels/ref/X_ref.h, its CPU code kernels/cpu/X*.cpp, its test tests/test_kernel_X.cpp, its
// benchmark bench/bench_X.cpp (docs/testing.md). sparse24 and sparse_linear are families with
// their own headers, kernels/cpu/sparse24.h and kernels/cpu/sparse_linear.h.
//
// These functions are the only entry to the kernels: each calls through its family's table of the
// dispatch (kernels/dispatch.h, defined in kernels/dispatch.cpp), resolved at the family's first
// call from FRUGAL_ISA: ref (kernels/ref/ in float), avx2 or avx512 (kernels/cpu/; auto: the
// CPU's widest). The tables are keyed by device, instruction set and element type (fp32 here); a
// second backend (CUDA) or a bf16 overload adds tables there, and callers of this header do not
// change.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "frugal/kernels/attention_pattern.h"
#include "frugal/kernels/bf16_rounding.h"
#include "frugal/kernels/dtype.h"

namespace frugal::kernels {

enum class GateAct { Gelu, Silu };

// ---- encoder: token + position embedding ----
// out (B,T,C) = wte[tokens] + wpe[t]; tokens (B,T), wte (Vp,C), wpe (maxT,C) or null (no position
// embedding: out = wte[tokens])
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                     int T, int C);
// dwte (Vp,C) +=, dwpe (maxT,C) +=; dout (B,T,C)
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                      int T, int C);

// ---- layernorm ----
// out (N,C), mean (N), rstd (N); inp (N,C), weight (C), bias (C) or null
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps);
// dinp (N,C) +=, dweight (C) +=, dbias (C) +=; dout (N,C), inp (N,C)
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);
// layernorm_forward writing the output as the bf16 input of the linears it feeds (train.precision =
// "bf16"): out16 (N,C) = the output rounded to nearest even, and out (N,C) the fp32 output as well
// when not null (the residual stream of a post-LN block); statistics and math in fp32, so out16 is
// exactly f32_to_bf16 of layernorm_forward's out on the same path.
void layernorm_forward_bf16(bf16* out16, float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C, float eps);

// ---- matmul: dense linear (the only BLAS call sites are in kernels/cpu/) ----
// out (N,OC) = inp (N,C) · weight (OC,C)ᵀ + bias (OC) or null
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);
// dinp (N,C) = (or += when accumulate_dinp) dout · weight; dweight (OC,C) += doutᵀ · inp;
// dbias (OC) += Σ dout. dout (N,OC), inp (N,C)
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     bool accumulate_dinp);

// ---- bf16: bfloat16 conversions and the dense linear's GEMMs on bf16 operands (fp32 results) ----
// out[i] = in[i] rounded to the nearest bf16, ties to even (NaN stays a quiet NaN, ±inf and
// subnormals are kept).
void f32_to_bf16(bf16* out, const float* in, size_t n);
void bf16_to_f32(float* out, const bf16* in, size_t n);  // exact
// in (n) rounded into out as `rounding` says (kernels/bf16_rounding.h): f32_to_bf16 to nearest,
// else stochastically, out[i] from the bits of in[i], the seed and the index rounding.first + i.
void round_to_bf16(bf16* out, const float* in, size_t n, const Bf16Rounding& rounding);
// A bf16 linear's output gradient dout (N,OC) in one pass: out (N,OC) = f32_to_bf16 of it, and
// dbias (OC) += its fp32 column sums, matmul_backward's bias gradient bit for bit on the same path.
void f32_to_bf16_bias_grad(bf16* out, float* dbias, const float* dout, int N, int OC);
// The matmul contract on bf16 inputs and weights: products exact, sums in fp32 (oneDNN's bf16
// matmul where the CPU computes bf16, fp32 GEMMs on the converted operands elsewhere).
// out (N,OC) = inp (N,C) · weight (OC,C)ᵀ + bias (OC, fp32) or null
void matmul_bf16_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int N,
                         int C, int OC);
// dinp (N,C) = (or += when accumulate_dinp) dout · weight; dweight (OC,C) += doutᵀ · inp (either
// may be null; inp too when dweight is). The bias gradient is matmul_backward's, from the fp32 dout.
void matmul_bf16_backward(float* dinp, float* dweight, const bf16* dout, const bf16* inp,
                          const bf16* weight, int N, int C, int OC, bool accumulate_dinp);
// How this process computes matmul_bf16: "native (oneDNN, ISA)" when the CPU has bf16
// dot-product instructions (AVX512_BF16, AMX), "emulated (oneDNN, ISA)" when oneDNN converts on an
// AVX-512 CPU without them, "converted to fp32" otherwise (and on the reference path).
std::string bf16_matmul_path();
bool bf16_matmul_native();

// ---- sparse24: 2:4 structured-sparse linear (docs/sparse24.md) ----
// S(W) = mask ⊙ W for a 2:4 mask (OC,IC): two kept entries in every group of 4 along IC, and with
// a transposable mask also along OC. The packed weight's layout belongs to the backend
// (kernels/cpu/sparse24.h); code outside kernels/ holds it through the owning handle
// Sparse24Packed and never sees the layout.
struct Sparse24Weight;
struct Sparse24WeightDeleter {
  void operator()(Sparse24Weight* weight) const;
};
using Sparse24Packed = std::unique_ptr<Sparse24Weight, Sparse24WeightDeleter>;
// An empty packed weight, for sparse24_pack to fill.
Sparse24Packed sparse24_new_weight();
// out = S(W) packed for the forward product and, when transposable, for the input gradient.
// W (OC,IC), mask (OC,IC) 0/1, OC % 4 == IC % 4 == 0; throws when the mask is not 2:4 (along both
// dimensions when transposable). Buffers are reused when the shape is unchanged.
void sparse24_pack(Sparse24Weight& out, const float* W, const uint8_t* mask, int OC, int IC,
                   bool transposable = true);
// Re-reads the kept values from W (OC,IC) into the packing built by the last sparse24_pack (same
// shape and mask): the cheap per-step update.
void sparse24_refresh_values(Sparse24Weight& packed, const float* W);
// out (N,OC) = inp (N,IC) · S(W)ᵀ + bias (OC) or null
void sparse24_matmul_forward(float* out, const float* inp, const Sparse24Weight& weight,
                             const float* bias, int N);
// dinp (N,IC) = (or += when accumulate) dout (N,OC) · S(W); needs a transposable packing.
void sparse24_matmul_backward_input(float* dinp, const float* dout, const Sparse24Weight& weight,
                                    int N, bool accumulate);
// dout_sparse (N,OC) = the unbiased 2:4 estimate (MVUE) of dout (N,OC) along N: in every pair of
// rows (2i, 2i+1) each column keeps one entry, row 2i with probability |a| / (|a| + |b|), and the
// kept entry becomes sign · (|a| + |b|), so E[dout_sparse] = dout and every group of 4 rows holds
// 2 non-zeros per column. A final odd row is copied. Random numbers: uniform_at(key, pair·whole_OC
// + column[o]), where column (OC) gives each column's index in the whole linear of whole_OC columns
// when dout holds a tensor-parallel rank's part of it (null: column[o] = o, whole_OC = OC), so every
// part draws the whole linear's numbers.
void mvue24_rows(float* dout_sparse, const float* dout, int N, int OC, uint64_t key,
                 const int32_t* column = nullptr, int whole_OC = 0);

// ---- sparse_linear: unstructured sparse linear (docs/sparse_linear.md) ----
// S(W) = W ⊙ M for an arbitrary 0/1 mask M (OC,IC) (dynamic sparse training: density ~0.05-0.5,
// the mask changes every ~100 steps). The products run over the kept entries only. The packed
// layout belongs to the backend (kernels/cpu/sparse_linear.h); code outside kernels/ holds it
// through the owning handle SparseLinearPacked. Scratch: per thread, two feature-major panels of
// 64 tokens (64 · (IC + OC) floats) and a 128 KiB result tile; per packed weight, up to 4 · nnz
// floats of token-group partial sums for the weight gradient (nnz = kept entries).
struct SparseLinearWeight;
struct SparseLinearWeightDeleter {
  void operator()(SparseLinearWeight* weight) const;
};
using SparseLinearPacked = std::unique_ptr<SparseLinearWeight, SparseLinearWeightDeleter>;
// An empty packed weight, for sparse_linear_pack to fill.
SparseLinearPacked sparse_linear_new_weight();
// out = S(W) packed by rows (forward, weight gradient) and by columns (input gradient), from
// W (OC,IC) and mask (OC,IC) 0/1 (non-zero = kept); any density, any OC, IC > 0. The
// structure rebuild after a mask change; buffers are reused when large enough.
void sparse_linear_pack(SparseLinearWeight& out, const float* W, const uint8_t* mask, int OC,
                        int IC);
// Re-reads the kept values from W (OC,IC) into the packing built by the last sparse_linear_pack
// (same shape and mask): the cheap per-step update.
void sparse_linear_refresh_values(SparseLinearWeight& packed, const float* W);
// Kept entries / (OC·IC) of the last packing.
double sparse_linear_density(const SparseLinearWeight& packed);
// out (N,OC) = inp (N,IC) · S(W)ᵀ + bias (OC) or null
void sparse_linear_forward(float* out, const float* inp, const SparseLinearWeight& weight,
                           const float* bias, int N);
// dinp (N,IC) = (or += when accumulate) dout (N,OC) · S(W)
void sparse_linear_backward_input(float* dinp, const float* dout, const SparseLinearWeight& weight,
                                  int N, bool accumulate);
// dweight (OC,IC) += (doutᵀ · inp) ⊙ M: the gradient at the kept positions, accumulated into the
// caller's dense buffer; entries outside the mask are not touched. dout (N,OC), inp (N,IC).
// The bias gradient is matmul_backward's (dbias only, the other pointers null).
void sparse_linear_backward_weight(float* dweight, const float* dout, const float* inp,
                                   const SparseLinearWeight& weight, int N);

// ---- attention: self-attention under an AttentionPattern (fused, tiled, online softmax) ----
// Query i attends to the keys j with pattern.allows(i, j); tiles the pattern leaves empty are
// never computed. out (B,T,C), lse (B,NH,T) log-sum-exp of each softmax row; qkv (B,T,3C) laid
// out [q | k | v], head h at columns h*HS .. h*HS+HS of each part. Extra memory O(tile²) per
// thread, no (T,T) matrix.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       const AttentionPattern& pattern);
// attention_forward on bf16 operands (train.precision = "bf16") where attention_bf16_operands
// says so: qkv is rounded to bf16 in place (nearest even; the values the products use, which
// attention_backward_bf16 then reads), Q·Kᵀ and P·V are products of bf16 values summed in fp32
// (vdpbf16ps where the CPU has AVX512_BF16; each P rounded to bf16 as it weights V), the softmax,
// its running max and sum and lse are fp32. Elsewhere attention_forward's fp32 result bit for bit,
// qkv untouched. out (fp32) and out16 (B,T,C) = out rounded to nearest even, bit for bit (the
// projection's input).
void attention_forward_bf16(float* out, bf16* out16, float* lse, float* qkv, int B, int T, int C,
                            int NH, const AttentionPattern& pattern);
// Whether attention_forward_bf16 computes on bf16 operands: rounding and packing a head's q, k, v
// is a pass over them (L3 traffic: about a third of the bf16 forward on preset M) that pays only
// when the packed operands serve several 64-row query tiles (T > 64); Strided's residue classes
// take fp32 rows.
inline bool attention_bf16_operands(const AttentionPattern& pattern, int T) {
  return T > 64 && pattern.kind() != AttentionPattern::Kind::Strided;
}
// dqkv (B,T,3C) =; dout (B,T,C), qkv, out, lse from the forward with the same pattern
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH,
                        const AttentionPattern& pattern);
// attention_backward after attention_forward_bf16, on bf16 operands where attention_bf16_operands
// says so: q, k, v are the bf16 values the forward left in qkv; dout is rounded to bf16 (nearest
// even) where it multiplies (dO·Vᵀ, Pᵀ·dO, and D_i = dO_i · out_i); P and dS (fp32, from the
// recomputed scores) are rounded to bf16 where they weight dO, Q and K; the products are of bf16
// values summed in fp32 (vdpbf16ps where the CPU has AVX512_BF16). Elsewhere attention_backward
// bit for bit.
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int B, int T, int C, int NH,
                             const AttentionPattern& pattern);

// ---- attention: one new query against a key/value cache (autoregressive decoding) ----
// out (C) = per head h: softmax(q_h · K_hᵀ / sqrt(HS)) · V_h over the cached positions j < t that
// the query, at position t - 1, may see (pattern.allows(t - 1, j): the same keys as row t - 1 of
// attention_forward over t positions, for a Bidirectional pattern too; t >= 1, the query's own key and value already cached). q (C); k_cache (t,C),
// v_cache (t,C): rows are positions, head h at columns h*HS .. h*HS+HS.
void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache,
                      int t, int C, int NH, const AttentionPattern& pattern);

// ---- qk_transform: QK-norm and rotary position embeddings on attention's queries and keys ----
// What runs between the qkv projection and attention (model.qk_norm, model.position = "rotary").
// Per row (b, t) and head h, on the head's HS queries and HS keys (not the values), in this order:
// - norm: x <- x / rms(x), rms(x) = sqrt(mean(x²) + kQkNormEps), no gain (modded-nanogpt's QK-norm);
// - rotary: each pair (x[i], x[i + HS/2]), i < HS/2, turned by the angle
//   (pos0 + t) · rope_base^(-2i/HS) (GPT-NeoX / Llama's half-split layout). HS must be even.
inline constexpr float kQkNormEps = 1e-6f;
struct QkTransform {
  bool norm = false;
  bool rotary = false;
  float rope_base = 10000.0f;
  bool any() const { return norm || rotary; }
};
// qkv (B,T,3C) [q | k | v] in place; inv_rms (B,T,2,NH) = 1/rms of the row's query heads then its
// key heads (written only with t.norm).
void qk_transform_forward(float* qkv, float* inv_rms, int B, int T, int pos0, int C, int NH,
                          const QkTransform& t);
// dqkv (B,T,3C): on entry its q and k parts are d loss / d (the transformed q, k); on exit d loss /
// d (the projection's q, k), in place (the v part untouched). qkv, inv_rms: the forward's outputs
// (the transformed values), from position 0.
void qk_transform_backward(float* dqkv, const float* qkv, const float* inv_rms, int B, int T, int C,
                           int NH, const QkTransform& t);

// ---- activations ----
// GELU, tanh approximation. out (n) = gelu(inp)
void gelu_forward(float* out, const float* inp, size_t n);
// dinp (n) = dout * gelu'(inp)
void gelu_backward(float* dinp, const float* dout, const float* inp, size_t n);
// ReLU² (the modded-nanogpt MLP): out (n) = max(inp, 0)²
void relu2_forward(float* out, const float* inp, size_t n);
// dinp (n) = dout * 2·max(inp, 0)
void relu2_backward(float* dinp, const float* dout, const float* inp, size_t n);
// out (n) = act(gate) * up  (GEGLU: act = gelu-tanh, SwiGLU: act = silu)
void gated_forward(float* out, const float* gate, const float* up, size_t n, GateAct act);
// dgate (n) =, dup (n) =
void gated_backward(float* dgate, float* dup, const float* dout, const float* gate,
                    const float* up, size_t n, GateAct act);
// The three forwards writing bf16 (the input of the MLP's output projection under train.precision =
// "bf16", which no backward reads in fp32): fp32 math, out (n) = the fp32 forward's result rounded to
// nearest even, bit for bit on the same path.
void gelu_forward_bf16(bf16* out, const float* inp, size_t n);
void relu2_forward_bf16(bf16* out, const float* inp, size_t n);
void gated_forward_bf16(bf16* out, const float* gate, const float* up, size_t n, GateAct act);

// ---- elementwise: residual stream, dropout, scaling, sum of squares ----
// out (n) = a + b
void residual_forward(float* out, const float* a, const float* b, size_t n);

// dropout: the mask is a pure function of (key, index), nothing stored, recomputed backward.
// x (n) *= keep(key, first + i) / (1 - p), in place: x is elements [first, first + n) of the
// masked tensor. p == 0 is a no-op.
void dropout_apply(float* x, size_t n, float p, uint64_t key, size_t first = 0);
// Σ x² in double (for the global gradient norm): chunks of 4096 floats, each summed in 8 float
// lanes (then its last n % 8 floats in double), the chunks' sums added in double in order, so
// every thread count gives the same bits.
double sum_squares(const float* x, size_t n);
// The same sum over a stream fed in pieces, e.g. the gradient slices of a model split into block
// ranges, fed range by range in order: sum_squares_finish gives exactly sum_squares of the pieces'
// concatenation, provided every piece but the last holds a multiple of 8 floats.
struct SumSquaresStream {
  double total = 0;      // the completed chunks' sums, added in order
  size_t filled = 0;     // floats of the current chunk consumed so far
  float lanes[8] = {};   // the current chunk's lane sums
  float tail[7] = {};    // the last piece's floats after its last full group of 8
  int tail_count = 0;
};
void sum_squares_feed(SumSquaresStream& stream, const float* x, size_t n);
double sum_squares_finish(const SumSquaresStream& stream);
// x (n) *= s
void scale_inplace(float* x, size_t n, float s);

// ---- lm_head: fused LM head + softmax cross-entropy, chunked over rows (no (N,V) logits) ----
// losses (N) = -log softmax(inp · weightᵀ)[target] over the first V columns only (padding rows of
// weight never take part); rows whose target is -1 get loss 0 and no gradient.
// When dinp/dweight are non-null also backpropagates d(loss)/d(logit) = (p - onehot) * dloss:
// dinp (N,C) =, dweight (Vp,C) +=. inp (N,C), weight (Vp,C), targets (N).
// softcap > 0 (model.logit_softcap): the softmax is over the capped logits softcap·tanh(z/softcap),
// and the gradient passes through the cap (× 1 − tanh²); 0: the logits as they are. Every variant
// below takes it (after dloss, or after split).
// An output bias (the masked-LM head's): logits = inp · weight[:V]ᵀ + bias (V), capped after the
// bias when softcap > 0; its gradient dbias (V) += Σ over the rows of d loss / d logits (through the
// cap). Either may be null. The vocabulary-split versions below take none.
struct LmHeadBias {
  const float* bias = nullptr;
  float* dbias = nullptr;
};
void lm_head_cross_entropy(float* losses, float* dinp, float* dweight, const float* inp,
                           const float* weight, const int32_t* targets, int N, int C, int V,
                           float dloss, float softcap = 0.0f, const LmHeadBias& bias = {});
// The same over a vocabulary split between the ranks of a tensor-parallel group (Megatron's
// vocabulary-parallel cross-entropy): this rank's weight (V,C) holds columns [first, first + V) of
// the whole vocabulary (V may be 0), targets are ids of the whole vocabulary, and no rank forms
// more than its own logits. The rows' statistics combine over the group through `all_reduce_max`
// and `all_reduce_sum` (x (n) = the ranks' elementwise max or sum, the same bits on every rank),
// which every rank calls the same number of times with the same n: each chunk of rows reduces its
// maxima, then its sums of exponentials with the target logits. losses (N) come out whole on every
// rank; dinp (N,C) = this rank's columns' part of the input gradient (the caller sums it over the
// group); dweight (V,C) += this rank's rows.
struct VocabSplit {
  int first = 0;
  int whole = 0;  // the whole vocabulary's real columns: the chunks of rows are the same on every rank
  std::function<void(float*, size_t)> all_reduce_max, all_reduce_sum;
};
void lm_head_cross_entropy_split(float* losses, float* dinp, float* dweight, const float* inp,
                                 const float* weight, const int32_t* targets, int N, int C, int V,
                                 float dloss, const VocabSplit& split, float softcap = 0.0f);
// logits (N,V) = inp (N,C) · weight[:V]ᵀ (+ bias (V) when not null) (for sampling and export checks)
void lm_head_logits(float* logits, const float* inp, const float* weight, int N, int C, int V,
                    const float* bias = nullptr);
// logits (n) = softcap · tanh(logits / softcap), in place (softcap > 0)
void lm_head_softcap(float* logits, size_t n, float softcap);
// The two above with the head's bf16 working copy (ops.h section bf16): the three GEMMs take bf16
// operands — the rows of inp rounded to bf16, weight, and d loss / d logits rounded to bf16 after
// the fp32 softmax — and sum in fp32 (the matmul_bf16 contract); the logits, their maxima, sums,
// log-sum-exp and the loss stay fp32. dinp and dweight as above (fp32); the bias gradient sums the
// fp32 d loss / d logits.
void lm_head_cross_entropy_bf16(float* losses, float* dinp, float* dweight, const float* inp,
                                const bf16* weight, const int32_t* targets, int N, int C, int V,
                                float dloss, float softcap = 0.0f, const LmHeadBias& bias = {});
void lm_head_cross_entropy_split_bf16(float* losses, float* dinp, float* dweight, const float* inp,
                                      const bf16* weight, const int32_t* targets, int N, int C, int V,
                                      float dloss, const VocabSplit& split, float softcap = 0.0f);

// ---- moe: mixture-of-experts routing, permutation and grouped linear (model/moe.h) ----
// R = N·k routed rows, grouped by expert; E experts, at most kMaxExperts.
inline constexpr int kMaxExperts = 1024;
// Token-choice top-k router: probs (N,E) = softmax(logits (N,E)), lse (N) = logsumexp(logits);
// expert (N,k) = the k experts of largest probs + bias (bias (E) or null: it steers the choice
// only), best first, ties to the lower expert index; weight (N,k) = their probs divided by the
// sum of the k.
void moe_router_forward(float* probs, float* lse, int32_t* expert, float* weight, const float* logits,
                        const float* bias, int N, int E, int k);
// dlogits (N,E) = d loss / d logits from dweight (N,k), d loss / d weight; dprobs (E) or null, added
// to every row's d loss / d probs (the Switch loss's); dlse, d loss / d lse_n = dlse · lse_n (the
// z-loss's). probs, lse, expert, weight: the forward's.
void moe_router_backward(float* dlogits, const float* dweight, const float* probs, const float* lse,
                         const int32_t* expert, const float* weight, const float* dprobs, float dlse,
                         int N, int E, int k);
// Gather: out (R,C) row i = inp (N,C) row src[i].
void moe_permute(float* out, const float* inp, const int32_t* src, int R, int C);
// Combine: out (N,C) = (or += when accumulate) Σ_j weight[n,j] · inp (R,C) row pos[n,j]; pos,
// weight (N,k), weight null: 1 (the gather's backward).
void moe_unpermute(float* out, const float* inp, const int32_t* pos, const float* weight, int N, int k,
                   int C, bool accumulate);
// The combine's backward: dinp (R,C) row pos[n,j] = weight[n,j] · dout[n]; dweight (N,k) =
// <dout[n], inp row pos[n,j]>. dout (N,C).
void moe_unpermute_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                            const int32_t* pos, const float* weight, int N, int k, int C);
// Grouped linear: rows [offsets[e], offsets[e+1]) of inp (R,C) through expert e: out (R,OC) rows =
// inp rows · weight[e] (OC,C)ᵀ + bias[e] (OC); weight (E,OC,C), bias (E,OC) or null, offsets (E+1).
void moe_grouped_forward(float* out, const float* inp, const float* weight, const float* bias,
                         const int32_t* offsets, int E, int C, int OC);
// matmul_backward per expert: dinp (R,C) = (or +=), dweight (E,OC,C) +=, dbias (E,OC) +=.
void moe_grouped_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const int32_t* offsets, int E, int C, int OC,
                          bool accumulate_dinp);
// The two above on the experts' bf16 working copy (weight (E,OC,C) bf16): the rows of inp and of
// dout rounded to bf16 as they enter the GEMMs (the matmul_bf16 contract: sums in fp32); dbias from
// the fp32 dout.
void moe_grouped_forward_bf16(float* out, const float* inp, const bf16* weight, const float* bias,
                              const int32_t* offsets, int E, int C, int OC);
void moe_grouped_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const bf16* weight, const int32_t* offsets, int E, int C, int OC,
                               bool accumulate_dinp);

// ---- adamw ----
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t t;  // 1-based step count for bias correction
  // The gradient is g · grad_scale (one fp32 multiply, as scale_inplace's): gradient clipping's
  // factor without a pass of its own over g. 1 leaves g exactly as it is.
  float grad_scale = 1.0f;
};
// Fused AdamW on n contiguous floats: p, m, v updated in place from gradient g (times grad_scale).
// Decoupled decay p -= lr * wd * p is applied only when `decay` is true.
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                  bool decay);
// adamw_update writing the updated p rounded to bf16 into p16 (n) as well: the bf16 working copy
// of a bf16 model's weights (round_to_bf16 of the updated p with `rounding`, bit for bit) without a
// pass of its own.
void adamw_update_bf16(float* p, bf16* p16, const float* g, float* m, float* v, size_t n, const AdamWStep& s,
                       bool decay, const Bf16Rounding& rounding = {});

// ---- newton_schulz: Muon's orthogonalisation of an update matrix (optim/muon.h) ----
// The quintic Newton–Schulz iteration's coefficients (Keller Jordan's Muon): chosen for the
// steepest slope at zero, so singular values end near 1 (about 0.7 to 1.2), not exactly at 1.
inline constexpr float kNewtonSchulzA = 3.4445f, kNewtonSchulzB = -4.7750f, kNewtonSchulzC = 2.0315f;
// x (R,C) ← an approximation of U·Vᵀ where x = U·S·Vᵀ (its orthogonal polar factor):
// x /= ‖x‖_F + 1e-7, then `steps` times x = a·x + (b·A + c·A²)·x with A = x·xᵀ (R ≤ C), or for
// R > C the same on xᵀ, i.e. x = a·x + x·(b·A + c·A²) with A = xᵀ·x (the Gram matrix is always
// min(R,C)²). ‖x‖_F is summed in double; everything else in fp32.
void newton_schulz(float* x, int R, int C, int steps);
// The same iteration with its three products on bf16 operands (optim.muon.precision = "bf16"): x,
// the Gram matrix A and the polynomial B are rounded to bf16 (nearest even) where they enter a
// product, the sums are fp32 (the matmul_bf16 contract: oneDNN's bf16 matmul where the CPU computes
// bf16, fp32 GEMMs on the widened operands elsewhere); a·x, b·A and the norm stay fp32.
void newton_schulz_bf16(float* x, int R, int C, int steps);

}  // namespace frugal::kernels
