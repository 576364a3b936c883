// LinearFormat's default tensor-parallel part; see linear_format.h.
#include "frugal/model/linear_format.h"

#include "frugal/core/error.h"

namespace frugal {

std::shared_ptr<LinearFormat> LinearFormat::cut(const LinearCut&) const {
  fail("internal: the {} linear format has no tensor-parallel part", name());
}

}  // namespace frugal
