// config_file.cpp — --write-config (config_file.hpp).
#include "mnist_ddp/app/config_file.hpp"

#include <hdf5.h>

#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

// HDF5's own test: it finds the signature behind a user block too (checkpoints carry one).
bool is_hdf5_file(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const htri_t yes = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  return yes > 0;
}

// The TOML of the checkpoint --resume names: its stored configuration, the flags given over it.
std::string stored_config_toml(const Config& cfg, const std::string& given) {
  auto ops = make_cpu_ops();  // the layout is the same on every device
  const ConvNet model(*ops, 1);
  const CheckpointLayout layout = checkpoint_layout(model);
  const ResolvedCheckpoint r = resolve_checkpoint(cfg.resume, cfg.train.checkpoint.dir, layout,
                                                  "--write-config --resume", true);
  for (const auto& w : r.warnings) std::fprintf(stderr, "mnist_ddp: warning: %s\n", w.c_str());
  if (!r.state) {
    // As a run with --resume auto starts fresh there (the Slurm scripts always pass it).
    return fmt::format("# --resume auto: no checkpoint in {} yet: this run's configuration.\n",
                       cfg.train.checkpoint.dir) +
           config_toml(cfg);
  }
  const std::string& path = r.path;
  const TrainingState& s = *r.state;
  nlohmann::json over = nlohmann::json::parse(given.empty() ? "{}" : given);
  over.erase("resume");  // which checkpoint to read, not a setting of the run it holds
  std::vector<std::string> unknown;
  Config stored;
  try {
    stored = config_from_json(s.config_json, over.dump(), &unknown);
  } catch (const UserError& e) {
    throw UserError(fmt::format("--write-config --resume {}: {}", path, e.what()));
  }
  std::string out = fmt::format("# The configuration stored in {} (step {}, run id {}){}.\n", path,
                                s.step, s.run_id.empty() ? "none" : s.run_id,
                                over.empty() ? "" : ", with the flags given over it");
  if (!unknown.empty()) {
    std::string names;
    for (const auto& k : unknown) names += (names.empty() ? "" : ", ") + k;
    out += fmt::format("# Left out, no flag of mnist_ddp {} any more: {}.\n", kVersion, names);
  }
  return out + config_toml(stored);
}

}  // namespace

int write_config_file(Comm& control, const Config& cfg, const std::string& given) {
  // Collective (agreement): rank 0 reads and writes; any failure is one error on every rank.
  run_agreed(control, [&] {
    if (control.rank() != 0) return;
    const std::string& file = cfg.write_config;
    std::error_code ec;
    if (fs::is_regular_file(file, ec) && is_hdf5_file(file)) {
      throw UserError(fmt::format(
          "--write-config {}: that is an HDF5 file (a checkpoint?), not overwritten; name a new "
          "file, e.g. run.toml",
          file));
    }
    const std::string text =
        cfg.resume == "none" ? config_toml(cfg) : stored_config_toml(cfg, given);
    // A temporary of our own beside it (never an existing file), renamed over FILE when whole.
    const std::string tmp = fmt::format("{}.tmp-{}", file, ::getpid());
    std::FILE* out = std::fopen(tmp.c_str(), "wx");
    const bool written =
        out != nullptr && std::fwrite(text.data(), 1, text.size(), out) == text.size();
    if (out == nullptr || std::fclose(out) != 0 || !written) {
      const std::string why = std::strerror(errno);
      if (out != nullptr) fs::remove(tmp, ec);
      throw UserError(fmt::format(
          "--write-config {}: cannot write it ({}); name a file in a writable directory", file,
          why));
    }
    fs::rename(tmp, file, ec);
    if (ec) {
      const std::string why = ec.message();
      fs::remove(tmp, ec);
      throw UserError(fmt::format("--write-config {}: cannot write it ({})", file, why));
    }
    std::printf("wrote the configuration to %s (run it with: mnist_ddp --config %s)\n",
                file.c_str(), file.c_str());
    std::fflush(stdout);
  });
  return kExitOk;
}

}  // namespace mnist_ddp
