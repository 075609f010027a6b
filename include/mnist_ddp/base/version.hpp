// version.hpp — mnist_ddp's version: printed by --version, logged at start, stored in every
// checkpoint and in --write-config's files.
#pragma once

namespace mnist_ddp {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace mnist_ddp
