// fuzz_common.hpp — what every libFuzzer target here shares: the contract check on an error, and
// a scratch file for the parsers that read from a path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mnist_ddp::fuzz {

// The contract on bad input: a UserError whose message names `must_name` (the file or a flag).
// Anything else (another exception, an empty or anonymous message) is a bug: it aborts, which
// libFuzzer records as a crash with its input.
void require_clear_error(const std::string& message, const std::string& must_name);

// Writes the input to a per-process scratch file with this suffix and returns its path.
std::string write_scratch(const std::uint8_t* data, std::size_t size, const std::string& suffix);

}  // namespace mnist_ddp::fuzz
