// fuzz_cli.cpp — libFuzzer target: the command line. The input is split on NUL and newline into
// at most 64 arguments after "mnist_ddp"; parse_cli and the device checks must either accept it
// or throw one UserError (exit code 2) that names a flag or says what to run instead.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/app/flag_rules.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/launch/device.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args = {"mnist_ddp"};
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 65; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty() && args.size() < 65) args.push_back(cur);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  mnist_ddp::Config cfg;
  std::string given;  // as every launch asks for it (the flags set, for --write-config)
  try {
    if (mnist_ddp::parse_cli(static_cast<int>(args.size()), argv.data(), cfg, false, &given) ==
        mnist_ddp::ParseOutcome::Run) {
      for (mnist_ddp::Device d : {mnist_ddp::Device::Cpu, mnist_ddp::Device::Cuda})
        for (bool multiple : {true, false}) {
          try {
            mnist_ddp::check_flags_for_device(cfg, d, multiple);
          } catch (const mnist_ddp::UserError& e) {
            if (e.exit_code() != mnist_ddp::kExitUserError) __builtin_trap();
            mnist_ddp::fuzz::require_clear_error(e.what(), "--");
          }
        }
      (void)mnist_ddp::config_json(cfg);
      try {
        (void)mnist_ddp::config_toml(cfg);  // a string it cannot hold is a clear error
      } catch (const mnist_ddp::UserError& e) {
        mnist_ddp::fuzz::require_clear_error(e.what(), "--");
      }
    }
  } catch (const mnist_ddp::UserError& e) {
    if (e.exit_code() != mnist_ddp::kExitUserError) __builtin_trap();
    // Every parse error names the flag (or the argument) it is about.
    mnist_ddp::fuzz::require_clear_error(e.what(), "");
    const std::string m = e.what();
    if (m.find("--") == std::string::npos && m.find('\'') == std::string::npos) {
      mnist_ddp::fuzz::require_clear_error(m, "--");
    }
  }
  return 0;
}
