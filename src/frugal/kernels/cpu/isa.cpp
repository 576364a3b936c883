// The run-time instruction-set choice; see isa.h.
#include "frugal/kernels/cpu/isa.h"

#include <cstdlib>
#include <string>

#include "frugal/core/error.h"

namespace frugal::kernels {
namespace {

bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }

Isa isa_from_environment() {
  const char* env = std::getenv("FRUGAL_ISA");
  const Isa requested = env && *env ? parse_isa(env) : Isa::Auto;
  if (requested == Isa::Avx512 && !cpu_has_avx512())
    fail("FRUGAL_ISA=avx512 but this CPU has no AVX-512F; unset it or use FRUGAL_ISA=avx2");
  if (requested == Isa::Auto) return cpu_has_avx512() ? Isa::Avx512 : Isa::Avx2;
  return requested;
}

}  // namespace

Isa parse_isa(std::string_view name) {
  if (name == "auto") return Isa::Auto;
  if (name == "ref") return Isa::Ref;
  if (name == "avx2") return Isa::Avx2;
  if (name == "avx512") return Isa::Avx512;
  fail("instruction set \"{}\" is not one of auto, ref, avx2, avx512 (FRUGAL_ISA, --isa)",
       std::string(name));
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Ref: return "ref";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    default: return "auto";
  }
}

Isa selected_isa() {
  static const Isa selected = isa_from_environment();
  return selected;
}

Isa max_isa() {
  return selected_isa() == Isa::Avx2 || !cpu_has_avx512() ? Isa::Avx2 : Isa::Avx512;
}

bool isa_available(Isa isa) { return isa != Isa::Avx512 || max_isa() == Isa::Avx512; }

std::vector<Isa> available_isas() {
  if (max_isa() == Isa::Avx512) return {Isa::Avx2, Isa::Avx512};
  return {Isa::Avx2};
}

Isa resolve_isa(Isa isa) { return isa == Isa::Auto ? selected_isa() : isa; }

void check_isa_available(Isa isa, std::string_view what) {
  FRUGAL_CHECK(isa_available(isa), "the AVX-512 {} was requested but {}; use auto, ref or avx2",
               std::string(what),
               cpu_has_avx512() ? "FRUGAL_ISA caps this process at avx2" : "this CPU has no AVX-512F");
}

}  // namespace frugal::kernels
