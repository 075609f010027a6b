// enum_names.hpp — one name table per user-facing enum (beside the enum): the command line's
// allowed values, --help, config_json, checkpoints and the logs all read the same table, so a
// name is spelled once. A table lists every value exactly once (tests/unit/cli_test.cpp checks).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mnist_ddp {

template <class E>
struct NameOf {
  E value;
  std::string_view name;
};

// The name of `value` ("?" if the table lacks it, which the tests rule out).
template <class E, std::size_t N>
constexpr const char* name_in(const std::array<NameOf<E>, N>& table, E value) {
  for (const auto& entry : table)
    if (entry.value == value) return entry.name.data();
  return "?";
}

// The value named `name`, or nullopt.
template <class E, std::size_t N>
constexpr std::optional<E> value_in(const std::array<NameOf<E>, N>& table, std::string_view name) {
  for (const auto& entry : table)
    if (entry.name == name) return entry.value;
  return std::nullopt;
}

// Every name, in table order (the parser's allowed values, as --help lists them).
template <class E, std::size_t N>
std::vector<std::string> names_in(const std::array<NameOf<E>, N>& table) {
  std::vector<std::string> out;
  for (const auto& entry : table) out.emplace_back(entry.name);
  return out;
}

// "on" / "off" flags (--tf32, --cuda-graphs).
inline constexpr std::array<NameOf<bool>, 2> kOnOffNames{{{true, "on"}, {false, "off"}}};

}  // namespace mnist_ddp
