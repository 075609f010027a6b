// fuzz_checkpoint.cpp — libFuzzer target: the checkpoint loader on any bytes, seeded with real
// checkpoints and weights-only files (tests/fuzz/corpus/checkpoint). The bytes are written as a
// file and read by both loaders exactly as --resume and --init-weights read them (file CRC line
// in the user block first, then HDF5). Contract: the original state, or a UserError naming the
// file. A state that loads must be complete and finite (the loader's promises).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz_common.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/model/model.hpp"
#include "mnist_ddp/ops/ops.hpp"

namespace {

// The layout of the model the files must match (built once; the fuzzer process owns it).
const mnist_ddp::CheckpointLayout& layout() {
  static const mnist_ddp::CheckpointLayout l = [] {
    auto ops = mnist_ddp::make_cpu_ops();
    mnist_ddp::ConvNet model(*ops, 2);
    return mnist_ddp::checkpoint_layout(model);
  }();
  return l;
}

void require_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = mnist_ddp::fuzz::write_scratch(data, size, ".h5");
#ifdef FUZZ_RESTAMP
  // The hostile-file mode: a correct file CRC line over whatever bytes follow, so the mutations
  // reach HDF5's parser and the loader's own checks (the CRC gate is fuzzed by the other mode).
  if (size >= 512) mnist_ddp::refresh_file_crc(path);
#endif
  try {
    const mnist_ddp::TrainingState s = mnist_ddp::load_checkpoint(path, layout());
    require_finite(s.params);
    require_finite(s.momentum);
    if (s.step < 0) __builtin_trap();
  } catch (const mnist_ddp::UserError& e) {
    mnist_ddp::fuzz::require_clear_error(e.what(), path);
  }
  try {
    const mnist_ddp::ModelWeights w = mnist_ddp::load_model_weights(path, layout());
    require_finite(w.params);
  } catch (const mnist_ddp::UserError& e) {
    mnist_ddp::fuzz::require_clear_error(e.what(), path);
  }
  return 0;
}
