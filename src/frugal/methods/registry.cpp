// The list of every method plugin frugal ships, in a fixed order (also the default firing order
// where no runs-before constraint applies). New methods are added here.
#include "frugal/methods/freeze/freeze.h"
#include "frugal/methods/method.h"
#include "frugal/methods/sparse24/plugin.h"

namespace frugal {

const std::vector<MethodInfo>& registered_methods() {
  static const std::vector<MethodInfo> methods = {freeze::method_info(), sparse24::method_info()};
  return methods;
}

}  // namespace frugal
