// store.hpp — the checkpoint directory: file names, the writability probe run before training,
// listing newest first, --resume auto's discovery with fallback, --verify-checkpoints, and
// keep-last-K retention. The files themselves: checkpoint.hpp.
#pragma once

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mnist_ddp/checkpoint/checkpoint.hpp"

namespace mnist_ddp {

// "ckpt-00001200.h5" for step 1200.
std::string checkpoint_name(std::int64_t step);

// --keep-best's file, dir/ckpt-best.h5: a second name of the checkpoint with the run's best test
// top-1, out of the rotation (--keep, --resume auto and the preemption roll never see it).
std::string best_checkpoint_path(const std::string& dir);

// Makes `path` (a checkpoint of dir) the best one, atomically: a hard link (a copy where the
// filesystem has none) under a temporary name, fsync, rename over the previous best. Returns the
// best's path; UserError naming it and the fix when the filesystem refuses.
std::string keep_as_best(const std::string& dir, const std::string& path);

// A new lineage's run id: 16 hex digits from the system's random source (a fresh run makes one;
// resumed runs keep their checkpoint's).
std::string new_run_id();

// Creates dir if needed and proves it writable (create, fsync, remove a probe file). UserError
// naming the directory and the fix otherwise. Also removes temporaries a crashed writer left.
void prepare_checkpoint_dir(const std::string& dir);

// --dry-run's prepare_checkpoint_dir, writing nothing: dir is a writable directory, or does not
// exist and its nearest existing parent is writable (a run would create it; returns true then).
// UserError as prepare_checkpoint_dir's otherwise.
bool check_checkpoint_dir(const std::string& dir);

// fsync of a file, or of a directory (after a rename in it); UserError naming the path.
void fsync_path(const std::string& path, bool directory);

// Complete-named checkpoints in dir, newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// --resume auto: the newest checkpoint that loads; each one skipped is reported in `warnings`.
// nullopt when the directory has none (start fresh). UserError when files exist but none loads
// (naming `flag`, as the user typed it: "--resume auto").
std::optional<std::pair<std::string, TrainingState>> find_resume_checkpoint(
    const std::string& dir, const CheckpointLayout& layout, std::vector<std::string>* warnings,
    const std::string& flag = "--resume auto");

// The one resolver of a checkpoint named as --resume, --init-weights and --write-config --resume
// name one: `spec` is auto (the newest checkpoint of dir that loads, damaged ones skipped with a
// warning each), best (dir's --keep-best file; UserError naming `flag`, the directory and the fix
// when there is none) or a path (as given). `flag` is how the user named it ("--resume",
// "--eval-only --resume", "--init-weights"). With load_state, the file's training state is loaded
// too (auto loads each candidate anyway); a file that does not load is the loader's UserError.
enum class CheckpointChoice { Given, Newest, Best };
struct ResolvedCheckpoint {
  std::string path;  // "": auto found no checkpoint in dir (a run starts fresh)
  CheckpointChoice chosen = CheckpointChoice::Given;
  std::vector<std::string> warnings;   // "skipping damaged checkpoint: ..." (auto)
  std::optional<TrainingState> state;  // with load_state, or whenever auto found one
};
ResolvedCheckpoint resolve_checkpoint(const std::string& spec, const std::string& dir,
                                      const CheckpointLayout& layout, const std::string& flag,
                                      bool load_state);

// Resuming the training state `s` from `from` (rank 0): the run's best as dir knows it. A
// ckpt-best.h5 of this run better than what s recorded (resumed from an older checkpoint) stays
// the best to beat (s takes its best_top1 and best_step); with `link` (--keep-best, not a dry
// run) a resumed checkpoint recorded as the best but never linked (the job ended in between) is
// linked now. Another run's best, or a best that does not load, is left alone (the other-run
// check and the next best deal with them). Returns what to tell the user.
struct BestReconciled {
  std::vector<std::string> warnings;  // a best that does not load
  std::string linked;                 // "best: ... kept as ..." when linked now
};
BestReconciled reconcile_best(const std::string& dir, const std::string& from,
                              const CheckpointLayout& layout, TrainingState& s, bool link);

// --verify-checkpoints: every complete-named checkpoint of dir (newest first, then the best one)
// loaded the way
// --resume loads it. `error` is empty for a file that passes, else the loader's UserError text.
struct CheckpointVerdict {
  std::string path;
  std::int64_t step = -1;       // of a file that passes
  std::int64_t world_size = 0;  // of a file that passes
  std::string error;
};
std::vector<CheckpointVerdict> verify_checkpoints(const std::string& dir,
                                                  const CheckpointLayout& layout);

// keep-last-K retention within one lineage: deletes all but the newest `keep` checkpoints whose
// run id is `run_id` at steps up to `up_to_step` (the lineage's files of later steps, left by the
// branch a resume from an older checkpoint replaces, are neither counted nor deleted). A
// checkpoint of another run, of an older mnist_ddp (no run id) or whose owner cannot be read is
// never deleted and never counted: it is listed in `foreign`.
struct Retention {
  std::vector<std::string> deleted;
  std::vector<std::string> foreign;  // "PATH (run id X)" or "PATH (no run id)"
};
Retention prune_checkpoints(const std::string& dir, int keep, const std::string& run_id,
                            std::int64_t up_to_step = INT64_MAX);

// The checkpoints of lineage `run_id` in dir at steps after `step`, newest first: what a run
// resumed from an older checkpoint (--resume best, --resume PATH) will replace.
std::vector<std::string> later_in_lineage(const std::string& dir, const std::string& run_id,
                                          std::int64_t step);

// The checkpoints of dir that a run of lineage `run_id` whose next checkpoint is after
// `start_step` could overwrite (same file name: another lineage's, or one without a run id, at a
// later step; with keep_best also another lineage's best), as "ckpt-00000600.h5 (run id X)". A
// damaged file (nothing in it loads) is not in the way. Empty when the run can write safely.
std::vector<std::string> checkpoints_in_the_way(const std::string& dir, const std::string& run_id,
                                                std::int64_t start_step, bool keep_best = false);

// Records `path` as this job's preemption checkpoint (in dir/.preempt-<SLURM_JOB_ID or "local">)
// and deletes the one recorded before it when that is an older checkpoint of dir (never anything
// else). Returns the deleted path (empty if none).
std::string roll_preemption_checkpoint(const std::string& dir, const std::string& path);

}  // namespace mnist_ddp
