// run_options.cpp — Config -> the trainer's option structs (run_options.hpp).
#include "mnist_ddp/app/run_options.hpp"

namespace mnist_ddp {

TrainOptions train_options(const Config& cfg) {
  TrainOptions o;
  ScheduleOptions& s = o.schedule;
  s.epochs = cfg.epochs;
  s.max_steps = cfg.max_steps;
  s.batch_size = cfg.batch_size;
  s.accumulate = cfg.accumulate;
  s.eval_batch_size = cfg.eval_batch_size;
  s.seed = cfg.seed;
  s.shuffle = cfg.shuffle;
  s.drop_last = cfg.drop_last;

  OptimizerOptions& opt = o.optimizer;
  opt.sgd.lr = cfg.lr;
  opt.sgd.momentum = cfg.momentum;
  opt.sgd.dampening = cfg.dampening;
  opt.sgd.weight_decay = cfg.weight_decay;
  opt.sgd.nesterov = cfg.nesterov;
  opt.lr.base_lr = cfg.lr;
  opt.lr.schedule = cfg.lr_schedule;
  opt.lr.step_size = cfg.lr_step_size;
  opt.lr.gamma = cfg.lr_gamma;
  opt.lr.warmup_steps = cfg.warmup_steps;
  opt.lr.min_lr = cfg.min_lr;  // total_steps: the trainer's, once it knows the epoch

  GradientOptions& g = o.gradients;
  g.bucket_cap_bytes = static_cast<std::size_t>(cfg.bucket_cap_kb) * 1024;
  g.overlap = !cfg.no_overlap;
  g.compression = cfg.compression;
  g.powersgd.rank = cfg.powersgd_rank;
  g.powersgd.start_iter = cfg.powersgd_start_iter;
  g.powersgd.min_compression_rate = cfg.powersgd_min_compression_rate;
  g.powersgd.seed = cfg.seed;  // the same Q draws on every rank
  g.sync_bn = cfg.sync_bn;
  g.local_sgd = LocalSgdSchedule{cfg.local_sgd_start, cfg.local_sgd_period};
  g.amp = cfg.amp;

  CadenceOptions& c = o.cadence;
  c.eval_every = cfg.eval_every;
  c.log_every = cfg.log_every;
  c.check_replicas = cfg.check_replicas;
  c.straggler_every = cfg.straggler_every < 0 ? cfg.log_every : cfg.straggler_every;
  c.straggler_threshold = cfg.straggler_threshold;

  CheckpointOptions& k = o.checkpoint;
  k.dir = cfg.checkpoint_dir;
  k.every = cfg.checkpoint_every;
  k.keep = cfg.keep;
  k.keep_best = cfg.keep_best;

  o.stop.requeue = cfg.requeue;
  o.stop.requeue_signal = cfg.requeue_signal;

  SeamOptions& t = o.seams;
  t.hang_rank = cfg.debug_hang_rank;
  t.exit_rank = cfg.debug_exit_rank;
  t.desync_rank = cfg.debug_desync_rank;
  if (!cfg.debug_slow.empty()) t.slow = parse_debug_slow(cfg.debug_slow);
  t.sample_log = cfg.debug_sample_log;
  t.fail_capture = cfg.debug_fail_capture;
  return o;
}

}  // namespace mnist_ddp
