// cli.hpp — the command line of the run configuration (config.hpp: Config). One option table
// (src/app/flags.cpp: each flag declared once) drives parsing, --help, --config's TOML, the stored
// configuration and the resume comparison, so the usage text cannot drift from the parser.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "mnist_ddp/app/config.hpp"
#include "mnist_ddp/base/version.hpp"

namespace mnist_ddp {

enum class ParseOutcome { Run, ExitOk };

// Parses argv (and the TOML file of --config FILE, whose keys are the flags' names without the
// dashes; the command line wins) into cfg. --help / --version print (only when `print` is true,
// i.e. on rank 0) and return ExitOk. A bad command line or config file throws UserError naming
// the flag (and the file) and the fix. given (optional): the flags the command line or the file
// set, as config_json's object of them.
ParseOutcome parse_cli(int argc, char** argv, Config& cfg, bool print,
                       std::string* given = nullptr);

// The configuration as a TOML file --config reads back to the same configuration: every flag
// under the name --help gives it (without the dashes), grouped as --help groups them; the test
// seams only where set. UserError for a string the file cannot hold (a '#', a line break).
std::string config_toml(const Config& cfg);

// A stored configuration (config_json's object: a checkpoint's) with `given` (the same form)
// laid over it, as a Config: read through the same parser as --config (so its values are checked
// the same way). Keys this version does not know are skipped and named in *unknown.
Config config_from_json(const std::string& stored_json, const std::string& given,
                        std::vector<std::string>* unknown);

// The --help text, in groups; all: --help-all's, the test seams included (docs/flags.md's
// consistency test reads every flag from it).
std::string help_text(bool all = false);

// The configuration as one JSON object (logged at start, stored in every checkpoint).
std::string config_json(const Config& cfg);

// The stored configuration's keys a resume compares with the checkpoint's, warning where they
// changed (the flags the table marks compared_on_resume: those that shape the optimisation).
std::vector<std::string> settings_compared_on_resume();

}  // namespace mnist_ddp
