// flags.hpp — the option table of mnist_ddp: every flag, declared once (flags.cpp). Private to
// app/: cli.cpp parses with it, prints --help from it, and stores and compares configurations
// through it.
#pragma once

#include "flag_table.hpp"
#include "mnist_ddp/app/config.hpp"

namespace mnist_ddp {

// The heading of the test seams' group (hidden by --help, listed by --help-all).
inline constexpr const char* kTestSeamsGroup = "Test seams (the failures the test suite injects)";

// Declares every flag on t, each bound to the field of c it fills, in --help's groups and order.
void declare_flags(FlagTable& t, Config& c);

}  // namespace mnist_ddp
