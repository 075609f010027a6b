// store.cpp — the checkpoint directory: names, the writability probe, listing newest first,
// resume discovery with fallback, verification and keep-last-K retention.
#include "mnist_ddp/checkpoint/store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

bool parse_step(const std::string& name, std::int64_t* step) {
  // ckpt-<digits>.h5
  if (name.size() < 9 || name.rfind("ckpt-", 0) != 0 || !name.ends_with(".h5")) return false;
  const std::string digits = name.substr(5, name.size() - 8);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
  *step = std::stoll(digits);
  return true;
}

}  // namespace

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    throw UserError(fmt::format("{}: cannot open for fsync: {}", path, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw UserError(fmt::format("{}: fsync failed: {}", path, std::strerror(err)));
}

std::string checkpoint_name(std::int64_t step) {
  return fmt::format("ckpt-{:08d}.h5", step);
}

std::string best_checkpoint_path(const std::string& dir) {
  return (fs::path(dir) / "ckpt-best.h5").string();
}

std::string keep_as_best(const std::string& dir, const std::string& path) {
  const std::string best = best_checkpoint_path(dir);
  const std::string tmp = (fs::path(dir) / ".ckpt-best.tmp").string();
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_hard_link(path, tmp, ec);
  if (ec) {
    ec.clear();  // no hard links here (some parallel filesystems): a copy, made durable
    fs::copy_file(path, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fsync_path(tmp, false);
  }
  if (!ec) fs::rename(tmp, best, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    throw UserError(
        fmt::format("--keep-best: cannot keep {} as {} ({}); free space or fix the permissions of "
                    "--checkpoint-dir {}, or run without --keep-best",
                    path, best, why, dir));
  }
  fsync_path(dir, true);
  return best;
}

std::string new_run_id() {
  std::random_device rd;
  const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", v);
}

void prepare_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw UserError(
        fmt::format("--checkpoint-dir {}: cannot create the directory: {}; pass a "
                    "writable --checkpoint-dir",
                    dir, ec.message()));
  }
  const std::string probe = dir + "/.mnist_ddp-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    throw UserError(
        fmt::format("--checkpoint-dir {}: not writable ({}); pass a writable "
                    "--checkpoint-dir (checked before training so no work is lost)",
                    dir, std::strerror(errno)));
  }
  const bool ok = ::write(fd, "ok", 2) == 2 && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) {
    throw UserError(fmt::format("--checkpoint-dir {}: writing a test file failed ({})", dir,
                                std::strerror(err)));
  }
  // Temporaries of a writer that was killed mid-write are never valid checkpoints.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".ckpt-", 0) == 0 && name.find(".tmp") != std::string::npos)
      fs::remove(entry.path(), ec);
  }
}

bool check_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  fs::path at = fs::absolute(dir, ec);
  bool created = false;
  while (!fs::exists(at, ec) && at.has_parent_path() && at != at.parent_path()) {
    at = at.parent_path();
    created = true;
  }
  if (!fs::is_directory(at, ec)) {
    throw UserError(
        fmt::format("--checkpoint-dir {}: {} is not a directory; pass a writable "
                    "--checkpoint-dir",
                    dir, at.string()));
  }
  if (::access(at.c_str(), W_OK | X_OK) != 0) {
    throw UserError(fmt::format(
        "--checkpoint-dir {}: {} is not writable ({}); pass a writable --checkpoint-dir", dir,
        created ? "its parent " + at.string() : at.string(), std::strerror(errno)));
  }
  return created;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::int64_t step = 0;
    if (parse_step(entry.path().filename().string(), &step))
      found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(path);
  return out;
}

std::vector<CheckpointVerdict> verify_checkpoints(const std::string& dir,
                                                  const CheckpointLayout& layout) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw UserError(fmt::format("--checkpoint-dir {}: no such directory to verify", dir));
  }
  std::vector<CheckpointVerdict> out;
  std::vector<std::string> files = list_checkpoints(dir);
  if (fs::exists(best_checkpoint_path(dir), ec)) files.push_back(best_checkpoint_path(dir));
  for (const auto& path : files) {
    CheckpointVerdict v;
    v.path = path;
    try {
      const TrainingState s = load_checkpoint(path, layout);
      v.step = s.step;
      v.world_size = s.world_size;
    } catch (const UserError& e) {
      v.error = e.what();
    }
    out.push_back(std::move(v));
  }
  return out;
}

namespace {
// The first three reasons, for the error itself (the caller never gets to print the warnings).
std::string why_none_loads(const std::vector<std::string>& warnings) {
  std::string out;
  for (std::size_t i = 0; i < warnings.size() && i < 3; ++i) {
    std::string w = warnings[i];
    const std::string prefix = "skipping damaged checkpoint: ";
    if (w.rfind(prefix, 0) == 0) w.erase(0, prefix.size());
    out += (i ? "; " : "") + w;
  }
  return out;
}
}  // namespace

std::optional<std::pair<std::string, TrainingState>> find_resume_checkpoint(
    const std::string& dir, const CheckpointLayout& layout, std::vector<std::string>* warnings,
    const std::string& flag) {
  const auto files = list_checkpoints(dir);
  if (files.empty()) return std::nullopt;
  for (const auto& path : files) {
    try {
      return std::make_pair(path, load_checkpoint(path, layout));
    } catch (const UserError& e) {
      warnings->push_back(fmt::format("skipping damaged checkpoint: {}", e.what()));
    }
  }
  throw UserError(
      fmt::format("{}: none of the {} checkpoint(s) in {} can be loaded ({}{}); move them away "
                  "to start fresh",
                  flag, files.size(), dir, why_none_loads(*warnings),
                  warnings->size() > 3 ? fmt::format("; and {} more", warnings->size() - 3) : ""));
}

ResolvedCheckpoint resolve_checkpoint(const std::string& spec, const std::string& dir,
                                      const CheckpointLayout& layout, const std::string& flag,
                                      bool load_state) {
  ResolvedCheckpoint r;
  if (spec == "auto") {
    r.chosen = CheckpointChoice::Newest;
    auto found = find_resume_checkpoint(dir, layout, &r.warnings, flag + " auto");
    if (found) {
      r.path = std::move(found->first);
      r.state = std::move(found->second);
    }
    return r;
  }
  if (spec == "best") {
    r.chosen = CheckpointChoice::Best;
    r.path = best_checkpoint_path(dir);
    std::error_code ec;
    if (!fs::is_regular_file(r.path, ec)) {
      throw UserError(fmt::format(
          "{} best: --checkpoint-dir {} has no best checkpoint ({}; a run trained with "
          "--keep-best keeps one); pass --resume auto or --resume PATH, or the --checkpoint-dir "
          "of that run",
          flag, dir, fs::path(r.path).filename().string()));
    }
  } else {
    r.path = spec;
  }
  if (load_state) r.state = load_checkpoint(r.path, layout);
  return r;
}

BestReconciled reconcile_best(const std::string& dir, const std::string& from,
                              const CheckpointLayout& layout, TrainingState& s, bool link) {
  BestReconciled out;
  const std::string best = best_checkpoint_path(dir);
  std::error_code ec;
  const bool exists = fs::exists(best, ec);
  std::optional<TrainingState> kept;
  if (exists) {
    try {
      kept = load_checkpoint(best, layout);
    } catch (const UserError& e) {
      out.warnings.push_back(
          fmt::format("--keep-best: {} (it is replaced by the next best)", e.what()));
    }
  }
  const bool ours = kept && !s.run_id.empty() && kept->run_id == s.run_id;
  if (ours && kept->best_top1 > s.best_top1) {
    s.best_top1 = kept->best_top1;
    s.best_step = kept->best_step;
  }
  const bool unlinked = s.best_step == s.step && s.best_top1 >= 0 && from != best &&
                        (!exists || (ours && kept->step != s.step));
  if (link && unlinked) {
    out.linked =
        fmt::format("best: {} records the best test top-1 ({:.2f}% at step {}), kept as {}", from,
                    100 * s.best_top1, s.best_step, keep_as_best(dir, from));
  }
  return out;
}

namespace {
std::string owner_text(const std::string& id) {
  return id.empty() ? "no run id" : "run id " + id;
}
}  // namespace

Retention prune_checkpoints(const std::string& dir, int keep, const std::string& run_id,
                            std::int64_t up_to_step) {
  Retention r;
  std::error_code ec;
  int kept = 0;
  for (const auto& path : list_checkpoints(dir)) {  // newest first
    std::int64_t step = 0;
    if (parse_step(fs::path(path).filename().string(), &step) && step > up_to_step) continue;
    const CheckpointOwner owner = checkpoint_owner(path);
    if (run_id.empty() || !owner.readable || owner.run_id != run_id) {
      r.foreign.push_back(
          fmt::format("{} ({})", path, owner.readable ? owner_text(owner.run_id) : "unreadable"));
      continue;
    }
    if (++kept <= std::max(keep, 1)) continue;
    if (fs::remove(path, ec)) r.deleted.push_back(path);
  }
  return r;
}

std::vector<std::string> later_in_lineage(const std::string& dir, const std::string& run_id,
                                          std::int64_t step) {
  std::vector<std::string> out;
  for (const auto& path : list_checkpoints(dir)) {  // newest first
    std::int64_t at = 0;
    if (!parse_step(fs::path(path).filename().string(), &at) || at <= step) continue;
    const CheckpointOwner owner = checkpoint_owner(path);
    if (owner.readable && !run_id.empty() && owner.run_id == run_id) out.push_back(path);
  }
  return out;
}

std::vector<std::string> checkpoints_in_the_way(const std::string& dir, const std::string& run_id,
                                                std::int64_t start_step, bool keep_best) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string best_name = fs::path(best_checkpoint_path(dir)).filename().string();
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::int64_t step = 0;
    const std::string name = entry.path().filename().string();
    const bool would_write =
        (parse_step(name, &step) && step > start_step) || (keep_best && name == best_name);
    if (!would_write) continue;
    const CheckpointOwner owner = checkpoint_owner(entry.path().string());
    // A damaged file (resume already skipped it, saying so) holds nothing that loads: writing that
    // step replaces it, as before run ids.
    if (!owner.readable || (!run_id.empty() && owner.run_id == run_id)) continue;
    out.push_back(fmt::format("{} ({})", name, owner_text(owner.run_id)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string roll_preemption_checkpoint(const std::string& dir, const std::string& path) {
  namespace fs = std::filesystem;
  const char* id = std::getenv("SLURM_JOB_ID");
  const fs::path marker = fs::path(dir) / fmt::format(".preempt-{}", id != nullptr ? id : "local");
  std::string previous;
  if (std::ifstream in(marker); in) std::getline(in, previous);
  // The marker is replaced atomically, so a crash leaves either the old or the new record.
  const fs::path tmp = marker.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << path << "\n";
  }
  std::error_code ec;
  fs::rename(tmp, marker, ec);
  if (previous.empty() || previous == path) return {};
  // Only an older checkpoint of this directory is ever deleted: a stale record (a job id reused
  // by another cluster, an edited file) must not cost the user anything else.
  const auto files = list_checkpoints(dir);  // newest first
  const auto at_new = std::find(files.begin(), files.end(), path);
  const auto at_old = std::find(files.begin(), files.end(), previous);
  if (at_new == files.end() || at_old == files.end() || at_old < at_new) return {};
  // And only one of the same lineage (a directory shared with another run by hand).
  const std::string owner = checkpoint_run_id(previous);
  if (owner.empty() || owner != checkpoint_run_id(path)) return {};
  fs::remove(previous, ec);
  return ec ? std::string{} : previous;
}

}  // namespace mnist_ddp
