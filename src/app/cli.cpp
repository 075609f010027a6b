// cli.cpp — the command line, --config's TOML, --help and the stored configuration, all read
// from the one option table (flags.cpp, declared with flag_table.hpp's machinery).
#include "mnist_ddp/app/cli.hpp"
#include "flags.hpp"
#include "mnist_ddp/app/flag_rules.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

// --help without the test seams' group (--help-all shows it). The seams keep their group in the
// parser, not CLI11's hidden one, so an error about one still names the flag.
std::string without_test_seams(std::string help) {
  const std::string heading = std::string("\n") + kTestSeamsGroup + ":\n";
  const std::size_t at = help.find(heading);
  if (at == std::string::npos) return help;
  const std::size_t next = help.find("\n\n", at + heading.size());  // the next group, if any
  help.erase(at, next == std::string::npos ? std::string::npos : next - at);
  return help;
}

const char* kDescription =
    "mnist_ddp: data-parallel training of the MNIST ConvNet over MPI.\n"
    "Launch with `mpirun -np N ./mnist_ddp`, `srun --mpi=pmix ./mnist_ddp`, or alone.";

// The option table bound to its own copy of a configuration: what --help, config_json and the
// TOML reader and writer read and fill.
struct BoundTable {
  explicit BoundTable(const Config& from) : cfg(from), table(app) {
    app.set_version_flag("--version", std::string("mnist_ddp ") + kVersion);
    app.set_help_all_flag("--help-all", "every flag, the test suite's seams (--debug-*) included");
    app.option_defaults()->always_capture_default();
    // A flag given twice takes the last value, so job scripts can append overrides.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    declare_flags(table, cfg);
  }
  Config cfg;
  CLI::App app{kDescription, "mnist_ddp"};
  FlagTable table;
};

// A TOML value CLI11's reader gives back exactly: numbers as JSON writes them (the shortest text
// that reads back to the same double), strings quoted. CLI11 2.1 cuts a value at '#' and reads no
// escapes, so a string with a '#', a line break or both kinds of quote cannot be written.
std::string toml_value(const std::string& name, const nlohmann::json& v) {
  if (!v.is_string()) return v.dump();
  const std::string s = v.get<std::string>();
  const bool dq = s.find('"') != std::string::npos, sq = s.find('\'') != std::string::npos;
  if (s.find_first_of("#\n\r") != std::string::npos || (dq && sq)) {
    throw UserError(fmt::format(
        "--write-config: the value of {} ('{}') cannot go into a config file (it holds a '#', a "
        "line break, or both kinds of quote); rename that path, or pass this flag on the command "
        "line instead of in the file",
        name, s));
  }
  return dq ? "'" + s + "'" : "\"" + s + "\"";
}

// The CLI11 error as the user's words: which flag or key, in which file, and the fix.
std::string parse_error_text(const CLI::ParseError& e, const std::string& config_path) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::FileError*>(&e) != nullptr) {
    return fmt::format(
        "--config {}: cannot read that file (no such file, or not readable); pass an existing "
        "TOML file (`mnist_ddp --write-config FILE` writes one)",
        config_path);
  }
  if (dynamic_cast<const CLI::ConfigError*>(&e) != nullptr) {
    const std::string prefix = "INI was not able to parse ";
    if (what.rfind(prefix, 0) == 0) {
      return fmt::format(
          "--config {}: unknown key '{}': no flag of mnist_ddp has that name (keys are the "
          "flags' names without the dashes, as `mnist_ddp --help` lists them)",
          config_path, what.substr(prefix.size()));
    }
    return fmt::format(
        "--config {}: {} (--write-config and --dry-run act on one invocation: "
        "pass them on the command line)",
        config_path, what);
  }
  if (!config_path.empty()) {
    return fmt::format(
        "command line or --config {}: {}. Run `mnist_ddp --help` for every flag and its values.",
        config_path, what);
  }
  return fmt::format("command line: {}. Run `mnist_ddp --help` for every flag.", what);
}

// A key given twice in a config file: CLI11 2.1 would keep the first value (or refuse a repeated
// true/false with "too many inputs"), not the last as on the command line, so it is refused by
// name. The file is read by CLI11's own TOML reader.
void check_config_keys(const std::string& path) {
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::FileError&) {
    return;  // the parser reports the unreadable file
  }
  std::map<std::string, int> seen;
  for (const CLI::ConfigItem& item : items) {
    // The reader merges a key repeated on the next line into one item of several values (no flag
    // here takes a list).
    if (++seen[item.fullname()] == 2 || item.inputs.size() > 1) {
      throw UserError(fmt::format(
          "--config {}: key '{}' is given twice; keep one (flags on the command line override "
          "the file's)",
          path, item.fullname()));
    }
  }
}

}  // namespace

ParseOutcome parse_cli(int argc, char** argv, Config& cfg, bool print, std::string* given) {
  BoundTable bound(cfg);
  CLI::App& app = bound.app;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (print) fmt::print("{}", without_test_seams(app.help()));
    return ParseOutcome::ExitOk;
  } catch (const CLI::CallForAllHelp&) {
    if (print) fmt::print("{}", app.help("", CLI::AppFormatMode::All));
    return ParseOutcome::ExitOk;
  } catch (const CLI::CallForVersion&) {
    if (print) fmt::print("mnist_ddp {}\n", kVersion);
    return ParseOutcome::ExitOk;
  } catch (const CLI::ParseError& e) {
    const CLI::Option* config = app.get_config_ptr();
    const bool from_file = config != nullptr && config->count() > 0;
    if (from_file) check_config_keys(config->as<std::string>());  // the likelier cause, named
    throw UserError(parse_error_text(e, from_file ? config->as<std::string>() : ""));
  }
  bound.table.apply();
  if (const CLI::Option* config = app.get_config_ptr(); config != nullptr && config->count() > 0) {
    check_config_keys(config->as<std::string>());
  }
  // Paths need not be UTF-8 on Linux: invalid bytes become U+FFFD instead of an exception.
  if (given != nullptr) {
    *given = bound.table.given().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  check_flag_rules(bound.cfg);  // flag_rules.cpp: values and combinations refused, by table
  cfg = bound.cfg;
  return ParseOutcome::Run;
}

std::string config_toml(const Config& cfg) {
  const BoundTable bound(cfg);
  const FlagTable& table = bound.table;
  // The test seams' defaults, to write a seam only where it is set.
  const nlohmann::json values = table.values(), unset = BoundTable(Config{}).table.values();
  std::string out = fmt::format(
      "# mnist_ddp {} configuration: `mnist_ddp --config FILE` runs it (flags on the command "
      "line override it).\n# Each key is a flag of `mnist_ddp --help-all` without its dashes.\n",
      kVersion);
  for (const FlagTable::Group& g : table.groups()) {
    std::string lines;
    for (const std::string& name : g.flags) {
      const std::string key = table.key_of(name);
      if (!values.contains(key)) continue;  // an action, or --config itself
      if (g.hidden && values[key] == unset[key]) continue;
      lines += fmt::format("{} = {}\n", name.substr(2), toml_value(name, values[key]));
    }
    if (!lines.empty()) out += fmt::format("\n# {}\n{}", g.name, lines);
  }
  return out;
}

Config config_from_json(const std::string& stored_json, const std::string& given,
                        std::vector<std::string>* unknown) {
  nlohmann::json merged = nlohmann::json::parse(stored_json, nullptr, false);
  if (merged.is_discarded() || !merged.is_object()) {
    throw UserError(
        "its stored configuration is not a JSON object (written by an older "
        "mnist_ddp): nothing to write");
  }
  const nlohmann::json over = nlohmann::json::parse(given.empty() ? "{}" : given);
  for (const auto& [key, value] : over.items()) merged[key] = value;
  BoundTable bound{Config{}};
  const FlagTable& table = bound.table;
  std::string toml;
  for (const auto& item : merged.items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    const auto it = std::find_if(table.stored().begin(), table.stored().end(),
                                 [&](const FlagTable::Stored& s) { return s.key == key; });
    if (it == table.stored().end()) {
      if (unknown != nullptr) unknown->push_back(key);
      continue;
    }
    toml += fmt::format("{} = {}\n", it->name.substr(2), toml_value(it->name, value));
  }
  std::istringstream in(toml);
  try {
    bound.app.parse_from_stream(in);
  } catch (const CLI::ParseError& e) {
    throw UserError(fmt::format("its stored configuration does not parse: {}", e.what()));
  }
  bound.table.apply();
  check_flag_rules(bound.cfg);
  return bound.cfg;
}

std::vector<std::string> settings_compared_on_resume() {
  return BoundTable(Config{}).table.compared_on_resume();
}

std::string help_text(bool all) {
  const BoundTable bound{Config{}};
  return all ? bound.app.help("", CLI::AppFormatMode::All) : without_test_seams(bound.app.help());
}

std::string config_json(const Config& cfg) {
  // The option table bound to a copy of this configuration: each flag's value as typed.
  // Paths need not be UTF-8 on Linux: invalid bytes become U+FFFD instead of an exception.
  return BoundTable(cfg).table.values().dump(-1, ' ', false,
                                             nlohmann::json::error_handler_t::replace);
}

}  // namespace mnist_ddp
