// The instruction sets of the CPU kernels and the one place that decides which may run.
// The build's baseline is x86-64-v3 (AVX2 + FMA); AVX-512 kernels are chosen at run time when the
// CPU has AVX-512F. FRUGAL_ISA=auto|avx2|avx512 in the environment caps the choice for the whole
// process (read once): frugal's own kernel families and oneDNN's JIT both stay at or below it, so
// the AVX2 path an AVX2-only laptop takes can be run, and tested, on an AVX-512 machine. OpenBLAS
// picks its kernels when it is loaded, from OPENBLAS_CORETYPE (Haswell: its AVX2 kernels).
#pragma once
#include <string_view>
#include <vector>

namespace frugal::kernels {

enum class Isa { Auto, Avx2, Avx512 };

// The widest instruction set kernels may use: the CPU's, capped by FRUGAL_ISA. Throws Error when
// FRUGAL_ISA names an unknown set or one this CPU lacks.
Isa max_isa();
// Whether kernels may use `isa` here (Auto and Avx2 always).
bool isa_available(Isa isa);
// The sets kernels may use here, narrowest first ({Avx2} or {Avx2, Avx512}): what tests and
// benchmarks loop over.
std::vector<Isa> available_isas();
// Auto -> max_isa(); any other value as it is.
Isa resolve_isa(Isa isa);
// Throws Error for a set that isa_available() refuses, naming `what` (a kernel family).
void check_isa_available(Isa isa, std::string_view what);
const char* isa_name(Isa isa);  // "auto", "avx2", "avx512"
Isa parse_isa(std::string_view name);  // the inverse; throws Error for anything else

}  // namespace frugal::kernels
