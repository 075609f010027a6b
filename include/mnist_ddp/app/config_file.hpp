// config_file.hpp — --write-config: a run's configuration, or the one stored in a checkpoint,
// written as the TOML file --config reads (cli.hpp config_toml).
#pragma once

#include <string>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/comm/comm.hpp"

namespace mnist_ddp {

// Collective (agreement): rank 0 writes cfg.write_config atomically (a temporary beside it, then
// a rename) and says so; every rank returns the exit status. Without --resume the file holds cfg;
// with --resume PATH | auto | best the configuration stored in that checkpoint, with the flags
// given (parse_cli's `given`, --resume's own excepted) laid over it. An existing HDF5 file (a
// checkpoint) is never overwritten.
int write_config_file(Comm& control, const Config& cfg, const std::string& given);

}  // namespace mnist_ddp
