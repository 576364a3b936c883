// The instruction sets of the CPU backend and the one place that decides which one runs.
// The build's baseline is x86-64-v3 (AVX2 + FMA); the AVX-512 kernels run when the CPU has AVX-512F.
// FRUGAL_ISA=auto|ref|avx2|avx512 in the environment (read once) chooses the instruction set of
// every kernel family for the whole process (kernels/dispatch.h): auto, the CPU's widest; ref, the
// naive reference templates of kernels/ref/ in float; avx2 or avx512, that set. avx2 also caps
// oneDNN's JIT, so the AVX2 path an AVX2-only laptop takes can be run, and tested, on an AVX-512
// machine. OpenBLAS picks its kernels when it is loaded, from OPENBLAS_CORETYPE (Haswell: its AVX2
// kernels).
#pragma once
#include <string_view>
#include <vector>

namespace frugal::kernels {

// Ref: the naive reference; Avx2, Avx512: the optimised kernels. Auto: the process's choice.
enum class Isa { Auto, Ref, Avx2, Avx512 };

// The instruction set every kernel family starts with: FRUGAL_ISA, auto resolved to the CPU's
// widest (never Auto). Throws Error when FRUGAL_ISA names an unknown set or one this CPU lacks.
Isa selected_isa();
// The widest optimised instruction set kernels may use: the CPU's, capped at avx2 by
// FRUGAL_ISA=avx2 (FRUGAL_ISA=ref does not cap it: tests still compare the optimised kernels
// against the reference). Throws as selected_isa() does.
Isa max_isa();
// Whether kernels may use `isa` here (Auto, Ref and Avx2 always).
bool isa_available(Isa isa);
// The optimised sets kernels may use here, narrowest first ({Avx2} or {Avx2, Avx512}): what tests
// and benchmarks loop over to compare each with the reference.
std::vector<Isa> available_isas();
// Auto -> selected_isa(); any other value as it is.
Isa resolve_isa(Isa isa);
// Throws Error for a set that isa_available() refuses, naming `what` (a kernel family).
void check_isa_available(Isa isa, std::string_view what);
const char* isa_name(Isa isa);  // "auto", "ref", "avx2", "avx512"
Isa parse_isa(std::string_view name);  // the inverse; throws Error for anything else

}  // namespace frugal::kernels
