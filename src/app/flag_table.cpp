// flag_table.cpp — the option table's machinery (flag_table.hpp): declaring, storing and reading
// back the flags that app/flags.cpp declares.
#include "flag_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

// A non-number passes the range checks and is then rejected by the type conversion with its own
// message.
bool parse_number(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0';
}

}  // namespace

const CLI::Validator& finite_check() {
  // On the command line and in --config (CLI11 runs a flag's checks on a config file's value
  // too): NaN and infinities (or a value beyond the largest double, which reads as one) are
  // refused by name.
  static const CLI::Validator v(
      [](std::string& s) {
        double x = 0;
        if (!parse_number(s, &x) || std::isfinite(x)) return std::string();
        return "must be a finite number (got " + s +
               (std::isnan(x) || s.find_first_of("iI") != std::string::npos
                    ? ")"
                    : ", beyond the largest double)");
      },
      "", "finite");  // no --help text: every float flag has it
  return v;
}

const CLI::Validator& positive_check() {
  static const CLI::Validator v(
      [](std::string& s) {
        double x = 0;
        return !parse_number(s, &x) || x > 0 ? std::string() : "must be > 0 (got " + s + ")";
      },
      "> 0", "positive");
  return v;
}

const CLI::Validator& non_negative_check() {
  static const CLI::Validator v(
      [](std::string& s) {
        double x = 0;
        return !parse_number(s, &x) || x >= 0 ? std::string() : "must be >= 0 (got " + s + ")";
      },
      ">= 0", "non-negative");
  return v;
}

CLI::Validator one_of(std::vector<std::string> allowed, const std::vector<std::string>& shown) {
  std::string listed;
  for (const std::string& s : shown) listed += (listed.empty() ? "" : ",") + s;
  listed = "{" + listed + "}";
  return CLI::Validator(
      [allowed = std::move(allowed), listed](std::string& s) {
        return std::find(allowed.begin(), allowed.end(), s) != allowed.end()
                   ? std::string()
                   : s + " not in " + listed;
      },
      listed, "one of");
}

Flag& Flag::check(const CLI::Validator& v) {
  option_->check(v);
  return *this;
}

Flag& Flag::type_name(const std::string& name) {
  option_->type_name(name);
  return *this;
}

Flag& Flag::compared_on_resume() {
  MNIST_DDP_CHECK(index_ < table_.stored_.size(),
                  "compared_on_resume: an action is not stored, so a resume cannot compare it");
  table_.stored_[index_].compared_on_resume = true;
  return *this;
}

void FlagTable::group(const std::string& name, bool hidden) {
  groups_.push_back(Group{name, hidden, {}});
}

CLI::Option* FlagTable::add(const std::string& name, CLI::Option* o) {
  MNIST_DDP_CHECK(!groups_.empty(), "flag " + name + " declared before any group");
  groups_.back().flags.push_back(name);
  return o->group(groups_.back().name);
}

Flag FlagTable::stored(const std::string& name, CLI::Option* o,
                       std::function<nlohmann::json()> value) {
  stored_.push_back(Stored{name, key_of(name), o, std::move(value)});
  return Flag(*this, stored_.size() - 1, o);
}

Flag FlagTable::flag(const std::string& name, bool& field, const std::string& help) {
  CLI::Option* o = add(name, app_.add_flag(name, field, help));
  return stored(name, o, [&field] { return nlohmann::json(field); });
}

Flag FlagTable::negated_flag(const std::string& name, bool& field, const std::string& help) {
  auto holder = std::make_unique<Negated>(field);
  Negated* h = holder.get();
  converted_.push_back(std::move(holder));
  CLI::Option* o = add(name, app_.add_flag(name, h->given, help));
  return stored(name, o, [h] { return nlohmann::json(h->given); });
}

Flag FlagTable::action(const std::string& name, bool& field, const std::string& help) {
  CLI::Option* o = add(name, app_.add_flag(name, field, help))->configurable(false);
  return Flag(*this, static_cast<std::size_t>(-1), o);
}

Flag FlagTable::action(const std::string& name, std::string& field, const std::string& help) {
  CLI::Option* o = add(name, app_.add_option(name, field, help))->configurable(false);
  return Flag(*this, static_cast<std::size_t>(-1), o);
}

void FlagTable::config_file(const std::string& help) {
  add("--config", app_.set_config("--config", "", help)->type_name("FILE"));
  app_.allow_config_extras(CLI::config_extras_mode::error);
}

void FlagTable::apply() const {
  for (const auto& c : converted_) c->apply();
}

nlohmann::json FlagTable::values() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Stored& s : stored_) j[s.key] = s.value();
  return j;
}

nlohmann::json FlagTable::given() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Stored& s : stored_) {
    if (s.option->count() > 0) j[s.key] = s.value();
  }
  return j;
}

std::vector<std::string> FlagTable::compared_on_resume() const {
  std::vector<std::string> keys;
  for (const Stored& s : stored_)
    if (s.compared_on_resume) keys.push_back(s.key);
  return keys;
}

std::string FlagTable::key_of(std::string name) {
  name.erase(0, name.find_first_not_of('-'));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace mnist_ddp
