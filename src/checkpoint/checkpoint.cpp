// checkpoint.cpp — a checkpoint file as a whole: written atomically (temporary name, fsync,
// rename, directory fsync; the `complete` attribute last), read with every check before and after
// the schema's groups (schema.cpp), who wrote it. The HDF5 calls are hdf5_io.cpp's, the CRCs
// file_crc.cpp's and payload_crc.cpp's, the weights-only format weights_file.cpp's; the directory
// (names, retention, resume discovery) is store.cpp; moving a state between ranks is
// broadcast.cpp.
#include "mnist_ddp/checkpoint/checkpoint.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "file_crc.hpp"
#include "hdf5_io.hpp"
#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "schema.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

CheckpointWriteHook& write_hook() {
  static CheckpointWriteHook hook;  // set once at start (set_checkpoint_write_hook), then read
  return hook;
}

// The file: its identity, then every group of the schema in its order, the payload CRC, and last
// the completeness marker.
void write_file(const std::string& tmp, const TrainingState& s, const CheckpointLayout& layout) {
  H5Handle fcpl(HDF5_CHECK(H5Pcreate(H5P_FILE_CREATE)), H5Pclose);
  HDF5_CHECK(H5Pset_userblock(fcpl.get(), kFileCrcBlock));
  H5Handle file(HDF5_CHECK(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT)),
                H5Fclose);
  const hid_t f = file.get();
  attr_str(f, "format", kCheckpointFormat);
  attr_i64(f, "format_version", kCheckpointVersion);
  attr_str(f, "model", kCheckpointModel);
  write_state_attrs(f, s);
  write_model_group(f, layout, s.params, s.buffers, s.num_batches_tracked);
  write_optimizer_group(f, layout, s);
  write_rng_group(f, s);
  write_rank_group(f, s);
  write_amp_group(f, s);
  write_progress_group(f, s);
  write_input_group(f, s.input);
  attr_u64(f, "payload_crc32", payload_crc32(s, kCheckpointVersion));
  HDF5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL));
  // Last: the completeness marker. A reader that does not find it rejects the file.
  attr_i64(f, "complete", 1);
  file.close_checked();
}

// What a failed write means to the user and what to do, from the system's error text in the
// library's message (HDF5 and our own writes both carry strerror's words); nullptr where none fits.
struct WriteFailure {
  const char* errno_text;
  const char* what;
  const char* fix;
};
constexpr WriteFailure kWriteFailures[] = {
    {"No space left on device", "the disk is full",
     "free space there, or pass another --checkpoint-dir"},
    {"Disk quota exceeded", "your disk quota is used up",
     "free space (quota -s shows it), or pass another --checkpoint-dir"},
    {"Read-only file system", "the filesystem is read-only",
     "pass a --checkpoint-dir on a writable filesystem"},
    {"No such file or directory", "the checkpoint directory is gone (removed or unmounted)",
     "restore it, or pass another --checkpoint-dir"},
    {"Permission denied", "this user may not write there",
     "fix the directory's permissions, or pass another --checkpoint-dir"},
    {"Input/output error", "the storage reported an I/O error",
     "check the filesystem (its server or disk), or pass another --checkpoint-dir"},
};

// A failed write leaves nothing behind but the earlier, complete checkpoints. The message says
// what happened and what to do first, the library's words after.
[[noreturn]] void discard_and_throw(const std::string& tmp, const std::string& final_path,
                                    const std::string& dir, const std::string& why) {
  std::error_code ec;
  fs::remove(tmp, ec);
  const WriteFailure* f = nullptr;
  for (const WriteFailure& w : kWriteFailures)
    if (why.find(w.errno_text) != std::string::npos) f = f == nullptr ? &w : f;
  throw UserError(
      fmt::format("checkpoint {} not written: {}; {}. The checkpoints already in {} are untouched. "
                  "(Detail: {})",
                  final_path, f != nullptr ? f->what : "the write failed",
                  f != nullptr ? f->fix
                               : "check the directory and its filesystem, or pass another "
                                 "--checkpoint-dir",
                  dir, why));
}

}  // namespace

std::string first_non_finite(const TrainingState& s, const CheckpointLayout& layout) {
  const auto scan = [](const std::vector<float>& arena, const std::vector<ArenaEntry>& entries,
                       const std::string& group) -> std::string {
    for (const auto& e : entries) {
      if (e.offset + e.numel > arena.size()) continue;
      std::size_t bad = 0;
      for (std::size_t i = 0; i < e.numel; ++i) bad += std::isfinite(arena[e.offset + i]) ? 0 : 1;
      if (bad > 0) {
        return fmt::format("{}/{} ({} of {} values non-finite)", group, e.name, bad, e.numel);
      }
    }
    return "";
  };
  for (const auto& found :
       {scan(s.params, layout.params, "/model"), scan(s.buffers, layout.buffers, "/model"),
        scan(s.momentum, layout.params, "/optimizer/momentum_buffer")}) {
    if (!found.empty()) return found;
  }
  return "";
}

CheckpointLayout checkpoint_layout(const ConvNet& model) {
  CheckpointLayout l;
  l.params = model.param_entries();
  l.buffers = model.buffer_entries();
  l.num_batches_tracked = {"layer1.1.num_batches_tracked", "layer2.1.num_batches_tracked"};
  return l;
}

void set_checkpoint_write_hook(CheckpointWriteHook hook) {
  write_hook() = std::move(hook);
}

std::string save_checkpoint(const std::string& dir, const TrainingState& s,
                            const CheckpointLayout& layout) {
  const std::string final_path = dir + "/" + checkpoint_name(s.step);
  // A diverged model is never written: --keep would rotate the good checkpoints away.
  if (const std::string bad = first_non_finite(s, layout); !bad.empty()) {
    throw UserError(fmt::format("refusing to write {}: {} holds NaN or infinity: the model has "
                                "diverged; nothing was written",
                                final_path, bad),
                    kExitTrainingDiverged);
  }
  const std::string tmp =
      dir + "/." + checkpoint_name(s.step) + ".tmp-" + std::to_string(::getpid());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  try {
    write_file(tmp, s, layout);
    stamp_file_crc(tmp);                  // after HDF5 has closed the file: its final bytes
    if (write_hook()) write_hook()(tmp);  // a test seam: an injected full disk
    fsync_path(tmp, false);
  } catch (const std::exception& e) {  // Hdf5Error (full disk, I/O) or UserError (fsync, seam)
    discard_and_throw(tmp, final_path, dir, e.what());
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    discard_and_throw(tmp, final_path, dir,
                      std::string("rename to the final name failed: ") + std::strerror(errno));
  }
  // The rename itself must reach the disk, or a crash could lose the new name.
  fsync_path(dir, true);
  return final_path;
}

CheckpointOwner checkpoint_owner(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  CheckpointOwner o;
  try {
    verify_file_crc(path);  // before HDF5 parses a byte of it
    const hid_t fid = open_quietly(path);
    if (fid < 0) return o;
    H5Handle file(fid, H5Fclose);
    if (!has_attr(file.get(), "format") || read_str(file.get(), "format") != kCheckpointFormat)
      return o;
    o.run_id = has_attr(file.get(), "run_id") ? read_str(file.get(), "run_id") : "";
    o.readable = true;
  } catch (const UserError&) {
  } catch (const Hdf5Error&) {
  }
  return o;
}

std::string checkpoint_run_id(const std::string& path) {
  return checkpoint_owner(path).run_id;
}

void refresh_file_crc(const std::string& path) {
  stamp_file_crc(path);
}

TrainingState load_checkpoint(const std::string& path, const CheckpointLayout& layout) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  try {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      throw UserError("no such file; pass an existing checkpoint to --resume, or --resume auto");
    }
    verify_file_crc(path);  // before HDF5 parses a byte of it
    if (H5Fis_hdf5(path.c_str()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw UserError("not an HDF5 file (truncated, or not a checkpoint)");
    }
    const hid_t fid = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fid < 0)
      throw UserError("cannot open as HDF5 (" + hdf5_error_text() + "): truncated or corrupt");
    H5Handle file(fid, H5Fclose);
    const hid_t f = file.get();
    if (!has_attr(f, "format") || read_str(f, "format") != kCheckpointFormat) {
      throw UserError(
          fmt::format("not an mnist_ddp checkpoint (no format attribute '{}')", kCheckpointFormat));
    }
    const std::int64_t version = read_i64(f, "format_version");
    if (version < kCheckpointOldestVersion || version > kCheckpointVersion) {
      throw UserError(
          fmt::format("checkpoint format version {}, this mnist_ddp reads versions {} to {}; "
                      "use the mnist_ddp that wrote it",
                      version, kCheckpointOldestVersion, kCheckpointVersion));
    }
    const std::string model = read_str(f, "model");
    if (model != kCheckpointModel) {
      throw UserError(fmt::format("checkpoint of model '{}', this program trains '{}'", model,
                                  kCheckpointModel));
    }
    if (!has_attr(f, "complete") || read_i64(f, "complete") != 1) {
      throw UserError("incomplete: the writer stopped before finishing this file");
    }
    if (has_attr(f, "contents") && read_str(f, "contents") == "weights") {
      throw UserError(
          "holds a model's weights only (no optimizer, no position; e.g. from "
          "tools/import_from_pytorch.py): train from it with --init-weights PATH, or evaluate it "
          "with --eval-only --resume PATH");
    }
    TrainingState s;
    read_state_attrs(f, s);
    const std::size_t np = layout.params.back().offset + layout.params.back().numel;
    const std::size_t nb = layout.buffers.back().offset + layout.buffers.back().numel;
    s.params.resize(np);
    s.buffers.resize(nb);
    s.momentum.resize(np);
    read_model_group(f, layout, s.params, s.buffers, s.num_batches_tracked);
    read_optimizer_group(f, layout, s);
    read_rng_group(f, s);
    // Version 2 requires every member it expects (a renamed or lost one is damage, not a
    // default); version 1 files had optional ones.
    const bool strict = version >= 2;
    if (strict || has_link(f, "rank")) read_rank_group(f, strict, s);
    read_amp_group(f, strict, s);
    s.format_version = version;
    if (version >= 2) {
      s.input = read_input_group(f);  // required from version 2 on
    }
    if (version >= 3) read_progress_group(f, s);  // required from version 3 on
    if (read_u64(f, "payload_crc32") != payload_crc32(s)) {
      throw UserError("payload CRC32 mismatch: the file is corrupt");
    }
    if (const std::string bad = first_non_finite(s, layout); !bad.empty()) {
      throw UserError(bad + " holds NaN or infinity: a diverged model, not resumable");
    }
    return s;
  } catch (const Hdf5Error& e) {
    throw UserError(fmt::format("checkpoint {}: unreadable: {}", path, e.what()));
  } catch (const UserError& e) {
    throw UserError(fmt::format("checkpoint {}: {}", path, e.what()));
  }
}

}  // namespace mnist_ddp
