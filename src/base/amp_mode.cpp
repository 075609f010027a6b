// amp_mode.cpp — the mixed-precision mode's names (amp_mode.hpp).
#include "mnist_ddp/base/amp_mode.hpp"

namespace mnist_ddp {

const char* amp_mode_name(AmpMode mode) {
  return name_in(kAmpModeNames, mode);
}

}  // namespace mnist_ddp
