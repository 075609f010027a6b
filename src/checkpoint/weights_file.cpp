// weights_file.cpp — a model's weights alone: the weights-only files tools/import_from_pytorch.py
// writes (/model and /data, a weights_crc32 over them) and the model part of a full checkpoint,
// for --init-weights and --eval-only.
#include <hdf5.h>
#include <zlib.h>

#include <fmt/format.h>
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "file_crc.hpp"
#include "hdf5_io.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "schema.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

// weights_crc32 of a weights-only file: every /model dataset's name and bytes, in name order,
// then the /data record (what tools/import_from_pytorch.py computes with zlib.crc32).
std::uint32_t weights_crc(const ModelWeights& w, const CheckpointLayout& layout) {
  std::vector<std::pair<std::string, std::pair<const void*, std::size_t>>> items;
  for (const auto& e : layout.params)
    items.push_back({e.name, {w.params.data() + e.offset, e.numel * sizeof(float)}});
  for (const auto& e : layout.buffers)
    items.push_back({e.name, {w.buffers.data() + e.offset, e.numel * sizeof(float)}});
  for (std::size_t i = 0; i < layout.num_batches_tracked.size(); ++i)
    items.push_back(
        {layout.num_batches_tracked[i], {w.num_batches_tracked.data() + i, sizeof(std::int64_t)}});
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  uLong c = crc32(0L, Z_NULL, 0);
  auto add = [&c](const void* p, std::size_t n) {
    c = crc32(c, static_cast<const Bytef*>(p), static_cast<uInt>(n));
  };
  for (const auto& [name, bytes] : items) {
    add(name.data(), name.size());
    add(bytes.first, bytes.second);
  }
  const double stats[] = {w.input.mean, w.input.std};
  add(stats, sizeof stats);
  const std::int64_t ints[] = {static_cast<std::int64_t>(w.input.labels_crc32),
                               w.input.train_count};
  add(ints, sizeof ints);
  add(w.input.name.data(), w.input.name.size());
  add(w.input.transform.data(), w.input.transform.size());
  return static_cast<std::uint32_t>(c);
}

bool is_weights_only(const std::string& path) {
  const hid_t fid = open_quietly(path);
  if (fid < 0) return false;
  H5Handle file(fid, H5Fclose);
  try {
    return has_attr(fid, "contents") && read_str(fid, "contents") == "weights";
  } catch (const Hdf5Error&) {
    return false;
  }
}

}  // namespace

ModelWeights load_model_weights(const std::string& path, const CheckpointLayout& layout) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw UserError(
        fmt::format("weights {}: no such file; pass an existing checkpoint (full or "
                    "weights-only) to --init-weights or --eval-only --resume",
                    path));
  }
  {
    try {
      verify_file_crc(path);  // before HDF5 parses a byte of it
    } catch (const UserError& e) {
      throw UserError(fmt::format("weights {}: {}", path, e.what()));
    }
  }
  if (!is_weights_only(path)) {
    // A full checkpoint: everything load_checkpoint validates.
    TrainingState s = load_checkpoint(path, layout);
    ModelWeights w;
    w.params = std::move(s.params);
    w.buffers = std::move(s.buffers);
    w.num_batches_tracked = std::move(s.num_batches_tracked);
    w.input = s.input;
    w.step = s.step;
    return w;
  }
  try {
    H5Handle file(HDF5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)), H5Fclose);
    const hid_t f = file.get();
    if (!has_attr(f, "format") || read_str(f, "format") != kCheckpointFormat) {
      throw UserError(
          fmt::format("not an mnist_ddp checkpoint (no format attribute '{}')", kCheckpointFormat));
    }
    // The weights-only layout is version 2's and unchanged since (version 3 added /progress to
    // full checkpoints only).
    const std::int64_t version = read_i64(f, "format_version");
    if (version < 2 || version > kCheckpointVersion) {
      throw UserError(fmt::format(
          "weights-only file of format version {}, this mnist_ddp reads versions 2 to {}", version,
          kCheckpointVersion));
    }
    if (read_str(f, "model") != kCheckpointModel) {
      throw UserError(fmt::format("weights of model '{}', this program trains '{}'",
                                  read_str(f, "model"), kCheckpointModel));
    }
    if (!has_attr(f, "complete") || read_i64(f, "complete") != 1) {
      throw UserError("incomplete: the writer stopped before finishing this file");
    }
    ModelWeights w;
    w.weights_only = true;
    w.params.resize(layout.params.back().offset + layout.params.back().numel);
    w.buffers.resize(layout.buffers.back().offset + layout.buffers.back().numel);
    read_model_group(f, layout, w.params, w.buffers, w.num_batches_tracked);
    w.input = read_input_group(f);
    if (read_u64(f, "weights_crc32") != weights_crc(w, layout)) {
      throw UserError("weights CRC32 mismatch: the file is corrupt");
    }
    TrainingState as_state;  // the same refusal of non-finite values as a full checkpoint's
    as_state.params = w.params;
    as_state.buffers = w.buffers;
    if (const std::string bad = first_non_finite(as_state, layout); !bad.empty()) {
      throw UserError(bad + " holds NaN or infinity: not a usable model");
    }
    return w;
  } catch (const Hdf5Error& e) {
    throw UserError(fmt::format("weights {}: unreadable: {}", path, e.what()));
  } catch (const UserError& e) {
    throw UserError(fmt::format("weights {}: {}", path, e.what()));
  }
}

}  // namespace mnist_ddp
