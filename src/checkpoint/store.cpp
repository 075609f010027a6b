// store.cpp — the checkpoint directory: names, the writability probe, listing newest first,
// resume discovery with fallback, verification and keep-last-K retention.
#include "mnist_ddp/checkpoint/store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "mnist_ddp/runtime/check.hpp"

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
  for (const auto& path : list_checkpoints(dir)) {
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

std::optional<std::pair<std::string, TrainingState>> find_resume_checkpoint(
    const std::string& dir, const CheckpointLayout& layout, std::vector<std::string>* warnings) {
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
      fmt::format("--resume auto: none of the {} checkpoint(s) in {} can be loaded "
                  "(see the warnings above); move them away to start fresh",
                  files.size(), dir));
}

void prune_checkpoints(const std::string& dir, int keep) {
  const auto files = list_checkpoints(dir);
  std::error_code ec;
  for (std::size_t i = static_cast<std::size_t>(std::max(keep, 1)); i < files.size(); ++i) {
    fs::remove(files[i], ec);
  }
}

}  // namespace mnist_ddp
