// test_util.hpp — helpers shared by the unit tests.
#pragma once

#include <functional>
#include <string>

namespace mnist_ddp::testing {

// Expects fn to throw UserError whose message contains both `file` and `what`.
void expect_user_error(const std::function<void()>& fn, const std::string& file,
                       const std::string& what);

}  // namespace mnist_ddp::testing
