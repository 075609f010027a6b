// run_options.hpp — the one place a flag's value becomes a layer's option: the trainer's
// per-concern structs (train/train_options.hpp) from the run's Config, with the defaults the
// flags leave to the program resolved here (--straggler-every -1: --log-every's window).
#pragma once

#include "mnist_ddp/app/config.hpp"
#include "mnist_ddp/train/train_options.hpp"

namespace mnist_ddp {

// cfg must have passed the flag rules (flag_rules.hpp): --debug-slow is parsed here and a value
// they refuse is not expected.
TrainOptions train_options(const Config& cfg);

}  // namespace mnist_ddp
