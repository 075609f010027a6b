// resume.hpp — the state a run starts from: --resume (the whole training state), --init-weights
// and --eval-only (a model, from a full or a weights-only checkpoint). Rank 0 loads it with its
// warnings (damaged files skipped, another dataset, changed settings), every rank receives it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/checkpoint/checkpoint.hpp"
#include "mnist_ddp/comm/comm.hpp"
#include "mnist_ddp/data/dataset.hpp"
#include "mnist_ddp/diagnostics/log.hpp"

namespace mnist_ddp {

class ConvNet;
class Trainer;

// Where a run starts: two steps that differ after --init-weights (a trained model, a fresh run)
// and must not be mixed up (a --trace window placed by the model's step traced steps the run
// never executes).
struct StartState {
  std::int64_t first_step =
      0;  // the step training continues from: the trainer's (0 unless --resume)
  std::int64_t model_step = 0;  // the step of the checkpoint the model came from (0 when fresh)
};

// Collective (an agreement, then broadcasts): resolve (checkpoint/store.hpp resolve_checkpoint:
// the file --resume, --init-weights or --eval-only --resume names, and why) -> warn (rank 0: the
// files skipped, the run's best, the data, the settings) -> broadcast (rank 0's bytes) -> apply
// (ConvNet::load_state, or the trainer's whole state, and the input transform it was trained
// with).
StartState restore_start_state(Comm& control, const Config& cfg, DataSplit& data, ConvNet& model,
                               Trainer& trainer, Logger& log);

// Collective (agreement), after the start state: no checkpoint of another run (another run id, or
// none: an older mnist_ddp) sits in --checkpoint-dir under a name this run will write (a later
// step): writing it would replace that run's file. One error naming the files and the fix.
void check_checkpoint_names(Comm& control, const Config& cfg, const Trainer& trainer);

// What a checkpoint says about its input, against this run's data (rank 0): a version-1 file does
// not record it; another training set (labels crc32) is worth a word before training on.
void warn_about_input(const InputRecord& in, const std::string& path, const DataSplit& data,
                      const std::function<void(const std::string&)>& warn);

// Rank 0, on resume: the settings that shape the run (batch, seed, schedule, optimizer) that
// differ from the checkpoint's stored configuration, in one warning naming each.
void warn_about_changed_settings(const std::string& stored_json, const Config& cfg,
                                 const std::function<void(const std::string&)>& warn);

}  // namespace mnist_ddp
