// local_sgd.cpp — post-local SGD's schedule (local_sgd.hpp).
#include "mnist_ddp/comm/local_sgd.hpp"

namespace mnist_ddp {

bool LocalSgdSchedule::local_at(std::int64_t step) const {
  return on() && step >= start;
}

bool LocalSgdSchedule::average_after(std::int64_t step) const {
  return local_at(step) && (step - start) % period == 0;
}

}  // namespace mnist_ddp
