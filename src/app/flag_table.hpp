// flag_table.hpp — the machinery of the option table (app/flags.cpp declares the flags with it):
// one call declares a flag whole — its name, the option field it fills (whose initialiser is its
// default), its help, its --help group, its checks, and whether a resume compares it — and from
// that one declaration come the parser (CLI11, the command line and --config's TOML alike),
// --help, the stored configuration (config_json: every flag under its own name, --a-b as "a_b",
// with its value as typed), --write-config's TOML and the resume comparison. Private to app/.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mnist_ddp/base/enum_names.hpp"

namespace mnist_ddp {

// The check every floating-point flag gets first, before its own range checks (NaN passes every
// comparison and an infinity means no setting): "must be a finite number (got ...)".
const CLI::Validator& finite_check();
// Range checks whose messages read well (CLI11's own print DBL_MAX as the bound).
const CLI::Validator& positive_check();
const CLI::Validator& non_negative_check();

// The check of a choice: one of `allowed` (the names and the old ones still accepted), shown in
// --help and its errors as the names alone, as CLI11's IsMember would list them.
CLI::Validator one_of(std::vector<std::string> allowed, const std::vector<std::string>& shown);

class FlagTable;

// One declared flag, to chain its checks on (flags.cpp: t.option(...).check(...)).
class Flag {
 public:
  Flag(FlagTable& table, std::size_t index, CLI::Option* option)
      : table_(table), index_(index), option_(option) {}
  Flag& check(const CLI::Validator& v);
  Flag& type_name(const std::string& name);
  // A resume that sees this setting changed against the checkpoint's run says so (the setting
  // then applies from the resumed step on): the settings that shape the optimisation.
  Flag& compared_on_resume();

 private:
  FlagTable& table_;
  std::size_t index_;
  CLI::Option* option_;
};

class FlagTable {
 public:
  explicit FlagTable(CLI::App& app) : app_(app) {}

  // The --help group of the flags declared after this call (one per concern; --help lists the
  // groups in this order). hidden: listed by --help-all only (the test seams).
  void group(const std::string& name, bool hidden = false);

  // A number or a string, filled as typed (a floating-point one checked finite first).
  template <class T>
  Flag option(const std::string& name, T& field, const std::string& help) {
    CLI::Option* o = add(name, app_.add_option(name, field, help));
    if constexpr (std::is_floating_point_v<T>) o->check(finite_check());
    return stored(name, o, [&field] { return nlohmann::json(field); });
  }
  // A switch: given means true.
  Flag flag(const std::string& name, bool& field, const std::string& help);
  // A switch that turns a setting off (--no-shuffle fills shuffle = false); stored as given.
  Flag negated_flag(const std::string& name, bool& field, const std::string& help);
  // One of an enum's names (its table, base/): stored as that name. aliases: older names still
  // accepted (each with the value it now means; help should say until when).
  template <class E, std::size_t N>
  Flag choice(const std::string& name, E& field, const std::array<NameOf<E>, N>& names,
              const std::string& help, std::vector<std::pair<std::string, E>> aliases = {}) {
    const std::vector<std::string> shown = names_in(names);
    std::vector<std::string> allowed = shown;
    for (const auto& a : aliases) allowed.push_back(a.first);
    return text<E>(
        name, field, [names](const E& v) { return std::string(name_in(names, v)); },
        [names, aliases](const std::string& s) {
          if (const auto v = value_in(names, s)) return *v;
          for (const auto& a : aliases)
            if (a.first == s) return a.second;
          return E{};  // unreachable: the check below admits only these names
        },
        help, one_of(allowed, shown));
  }
  // A value typed as text and converted (a signal name, --debug-slow's RANK:PHASE:MS): to_text
  // gives the text a value is stored as, from_text the value of a text the check admitted.
  template <class T>
  Flag text(const std::string& name, T& field, std::function<std::string(const T&)> to_text,
            std::function<T(const std::string&)> from_text, const std::string& help,
            const CLI::Validator& check) {
    auto holder = std::make_unique<TextHolder<T>>(field, std::move(to_text), std::move(from_text));
    TextHolder<T>* h = holder.get();
    converted_.push_back(std::move(holder));
    CLI::Option* o = add(name, app_.add_option(name, h->text, help));
    o->check(check);
    return stored(name, o, [h] { return nlohmann::json(h->text); });
  }
  // What an invocation does instead of training (--dry-run, --write-config, --clear-logs):
  // parsed and listed by --help, never stored, refused in a config file.
  Flag action(const std::string& name, bool& field, const std::string& help);
  Flag action(const std::string& name, std::string& field, const std::string& help);
  // --config FILE: CLI11's own TOML reader; a key that is no flag is an error, not ignored.
  void config_file(const std::string& help);

  // After a parse: each converted flag's text into its field.
  void apply() const;

  struct Stored {
    std::string name;  // "--batch-size"
    std::string key;   // "batch_size"
    CLI::Option* option;
    std::function<nlohmann::json()> value;
    bool compared_on_resume = false;
  };
  const std::vector<Stored>& stored() const { return stored_; }
  // Every stored flag's value, and those the command line or the config file set.
  nlohmann::json values() const;
  nlohmann::json given() const;
  // The stored keys a resume compares (Flag::compared_on_resume).
  std::vector<std::string> compared_on_resume() const;
  // The groups in declaration order, each with its flags' names (config_toml's order).
  struct Group {
    std::string name;
    bool hidden = false;
    std::vector<std::string> flags;
  };
  const std::vector<Group>& groups() const { return groups_; }
  // "--batch-size" -> "batch_size" (config_json's key).
  static std::string key_of(std::string name);

 private:
  friend class Flag;
  struct Converted {
    virtual ~Converted() = default;
    virtual void apply() = 0;
  };
  template <class T>
  struct TextHolder final : Converted {
    TextHolder(T& f, std::function<std::string(const T&)> to,
               std::function<T(const std::string&)> from)
        : field(f), text(to(f)), from_text(std::move(from)) {}
    void apply() override { field = from_text(text); }
    T& field;
    std::string text;
    std::function<T(const std::string&)> from_text;
  };
  struct Negated final : Converted {
    explicit Negated(bool& f) : field(f), given(!f) {}
    void apply() override { field = !given; }
    bool& field;
    bool given;
  };
  CLI::Option* add(const std::string& name, CLI::Option* o);
  Flag stored(const std::string& name, CLI::Option* o, std::function<nlohmann::json()> value);

  CLI::App& app_;
  std::vector<Group> groups_;
  std::vector<Stored> stored_;
  std::vector<std::unique_ptr<Converted>> converted_;  // text and negated flags' own values
};

}  // namespace mnist_ddp
