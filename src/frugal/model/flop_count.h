// PhaseFlops: the FLOPs of one part of a training step, by phase (what model/flops.h adds up and
// each component's flops() returns).
#pragma once

namespace frugal {

struct PhaseFlops {
  double forward = 0, backward_input = 0, backward_weight = 0, optimizer = 0;
  // Model FLOPs (forward + backward), the numerator of MFU.
  double model() const { return forward + backward_input + backward_weight; }
  double total() const { return model() + optimizer; }
  PhaseFlops& operator+=(const PhaseFlops& o) {
    forward += o.forward;
    backward_input += o.backward_input;
    backward_weight += o.backward_weight;
    optimizer += o.optimizer;
    return *this;
  }
};

// A component's FLOPs as executed (knowing what is frozen, cached or sparse) and as the dense
// model would need them.
struct ComponentFlops {
  PhaseFlops executed, dense;
};

}  // namespace frugal
