// The list of every method plugin frugal ships, in a fixed order (also the default firing order
// where no runs-before constraint applies), then those a program registers itself. New methods of
// frugal are added here.
#include "frugal/core/error.h"
#include "frugal/methods/freeze/freeze.h"
#include "frugal/methods/method.h"
#include "frugal/methods/mst/plugin.h"
#include "frugal/methods/multilevel/vcycle.h"
#include "frugal/methods/sparse24/plugin.h"

namespace frugal {

namespace {
std::vector<MethodInfo>& registry() {
  static std::vector<MethodInfo> methods = {freeze::method_info(), sparse24::method_info(),
                                            multilevel::method_info(), mst::method_info()};
  return methods;
}
}  // namespace

const std::vector<MethodInfo>& registered_methods() { return registry(); }

void register_method(MethodInfo info) {
  for (const MethodInfo& m : registry())
    FRUGAL_CHECK(m.name != info.name, "internal: a method named '{}' is already registered", info.name);
  registry().push_back(std::move(info));
}

}  // namespace frugal
