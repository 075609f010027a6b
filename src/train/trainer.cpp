// trainer.cpp — the run loop (epochs, steps, and the cadence between them: make_cadence),
// evaluation, metrics and progress; the step itself is step_engine.cpp, the checkpoint state
// trainer_checkpoint.cpp.
#include "mnist_ddp/train/trainer.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "mnist_ddp/checkpoint/store.hpp"
#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/data/sampler.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "mnist_ddp/process/requeue.hpp"
#include "mnist_ddp/process/signals.hpp"
#include "mnist_ddp/train/test_seams.hpp"

namespace mnist_ddp {
namespace {

// What the flags leave to the program, resolved once on the trainer's own copy of its options.
TrainOptions resolved(TrainOptions o) {
  if (o.cadence.straggler_every < 0) o.cadence.straggler_every = o.cadence.log_every;
  o.gradients.powersgd.seed = o.schedule.seed;  // the same Q draws on every rank
  o.optimizer.sgd.lr = o.optimizer.lr.base_lr;  // each step's rate: learning_rate(), below
  return o;
}

}  // namespace

Trainer::Trainer(const TrainOptions& options, std::string stored_config, const TrainerComms& comms,
                 Ops& ops, ConvNet& model, const DataSplit& data, Logger& log, Tracer* tracer)
    : opt_(resolved(options)),
      comm_(comms.control),
      model_comm_(comms.model),
      flight_(comms.flight),
      tracer_(tracer),
      ops_(ops),
      model_(model),
      data_(data),
      log_(log),
      report_(opt_.schedule, opt_.gradients, log),
      engine_(opt_, comms, ops, model, data, report_, log, tracer),
      layout_(checkpoint_layout(model)),
      run_id_(new_run_id()),
      stored_config_(std::move(stored_config)) {
  const ScheduleOptions& sched = opt_.schedule;
  const DistributedSampler probe(data.train.count, comm_.rank(), comm_.size(), sched.shuffle,
                                 sched.seed, sched.drop_last);
  const std::int64_t per_step = static_cast<std::int64_t>(sched.batch_size) * sched.accumulate;
  steps_per_epoch_ = (probe.num_samples() + per_step - 1) / per_step;
  total_steps_ = steps_per_epoch_ * sched.epochs;
  if (sched.max_steps > 0) total_steps_ = std::min(total_steps_, sched.max_steps);
  opt_.optimizer.lr.total_steps = total_steps_;
}

Trainer::~Trainer() = default;

EvalResult Trainer::evaluate() {
  const HostTraceScope span(tracer_, "evaluate", SpanArgs{.step = rec_.step});
  // Collective: evaluate the model every replica (and a checkpoint) would hold.
  broadcast_buffers(model_comm_, model_, comm_);
  const Shard shard = eval_shard(data_.test.count, comm_.rank(), comm_.size());
  std::vector<std::int64_t> order(static_cast<std::size_t>(shard.end - shard.begin));
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = shard.begin + static_cast<std::int64_t>(i);
  ops_.set_order(Ops::kEvalSplit, order);
  double acc[4] = {0, 0, 0, 0};  // loss sum, top1, top5, count
  const int chunk = std::min(opt_.schedule.eval_batch_size, model_.max_batch());
  for (std::int64_t b = 0; b < static_cast<std::int64_t>(order.size()); b += chunk) {
    const int n = static_cast<int>(
        std::min<std::int64_t>(chunk, static_cast<std::int64_t>(order.size()) - b));
    ops_.gather(Ops::kEvalSplit, b, n, data_.mean, data_.std, engine_.x(), engine_.y());
    const float* logits = model_.forward(engine_.x(), n, Mode::Eval);
    acc[0] += ops_.softmax_cross_entropy(n, kClasses, logits, engine_.y(), nullptr, 1.0);
    acc[1] += ops_.topk_correct(n, kClasses, logits, engine_.y(), 1);
    acc[2] += ops_.topk_correct(n, kClasses, logits, engine_.y(), 5);
    acc[3] += n;
  }
  // Collective: exact totals over the disjoint shards (every test image counted once).
  comm_.allreduce(std::span<double>(acc, 4), ReduceOp::Sum);
  EvalResult r;
  r.count = static_cast<std::int64_t>(acc[3]);
  if (r.count > 0) {
    r.loss = acc[0] / acc[3];
    r.top1 = acc[1] / acc[3];
    r.top5 = acc[2] / acc[3];
  }
  return r;
}

void Trainer::log_window() {
  rec_.window_loss += ops_.take_loss_sum();  // sync (GPU): the losses summed on the device
  // Collective (every --log-every steps on all ranks): the global mean loss of the window.
  double w[2] = {rec_.window_loss, static_cast<double>(rec_.window_images)};
  comm_.allreduce(std::span<double>(w, 2), ReduceOp::Sum);
  const double loss = w[1] > 0 ? w[0] / w[1] : 0.0;
  // Every rank holds the same global loss, so all stop here together. Under --amp fp16 an
  // overflowing step is skipped by the scaler (its loss may be inf): parameters are checked when
  // a checkpoint is written instead.
  if (!std::isfinite(loss) && opt_.gradients.amp != AmpMode::Fp16) {
    throw UserError(fmt::format("training diverged at step {}: the mean loss of the last {} "
                                "images is {} (lr {:g}); stopping without writing a checkpoint. {}",
                                rec_.step, w[1], loss, rec_.last_lr, good_checkpoint_advice()),
                    kExitTrainingDiverged);
  }
  const double elapsed = clock_.seconds();
  WindowFigures f;
  f.loss = loss;
  f.lr = rec_.last_lr;
  // This run's global images over this run's training time (a resumed run's earlier steps and an
  // epoch's short last step count as what they were).
  f.images_per_s = elapsed > 0 ? static_cast<double>(rec_.images) / elapsed : 0;
  f.comm_bytes = comm_.payload_bytes();
  if (engine_.scaler() != nullptr) {
    // Sync (GPU, once per window): the scale and the steps skipped since the last line (every
    // rank reads the same values: the skip decision was all-reduced).
    const LossScalerState amp = engine_.scaler()->state();
    const std::int64_t skipped = engine_.scaler()->take_skipped();
    rec_.skipped_steps += skipped;
    f.amp = WindowFigures::Amp{amp.scale, skipped, rec_.skipped_steps};
  }
  report_.train_window(position(), f);
  rec_.window_loss = 0;
  rec_.window_images = 0;
}

void Trainer::stop_clock() {
  rec_.window_loss += ops_.take_loss_sum();
  clock_.stop();
}

RunCadence Trainer::make_cadence(std::int64_t first_step) {
  const CadenceOptions& k = opt_.cadence;
  RunCadence c;
  c.add({"replica check", k.check_replicas, [this](std::int64_t step) {
           check_replicas(comm_, model_, step);  // collective: a hash of the parameters
           return 0;
         }});
  c.add({"progress line", 1, [this, first_step](std::int64_t step) {
           // The live progress line (a TTY, at most 5 a second): the window's loss, images/s
           // and the ETA.
           if (!log_.live_progress() ||
               std::chrono::steady_clock::now() - last_progress_ <= std::chrono::milliseconds(200))
             return 0;
           last_progress_ = std::chrono::steady_clock::now();
           rec_.window_loss += ops_.take_loss_sum();  // sync (GPU): the device's loss sum
           const double elapsed = std::max(clock_.seconds(), 1e-9);
           const double rate = std::max((step - first_step) / elapsed, 1e-9);
           report_.progress(position(),
                            rec_.window_images > 0 ? rec_.window_loss / rec_.window_images : 0.0,
                            rec_.images / elapsed, (total_steps_ - step) / rate);
           return 0;
         }});
  c.add({"log window", k.log_every, [this](std::int64_t) {
           log_window();  // collective: the window's global mean loss
           return 0;
         }});
  c.add({"straggler window", stragglers_ ? k.straggler_every : 0, [this](std::int64_t) {
           // Collective (one allgather per window): every rank's compute time, scored the same
           // on all.
           for (const StragglerEvent& e : stragglers_->end_window(comm_))
             report_.straggler(position(), e, stragglers_->ranks(), stragglers_->threshold());
           return 0;
         }});
  c.add({"stop agreement", 1, [this](std::int64_t step) {
           // Collective, every step: a stop signal on any rank stops all of them here, together.
           const int stop = agree_stop_signal(comm_);
           if (stop == 0) return 0;
           stop_clock();
           report_.stopping(signal_name(stop), step);
           stop_ = decide_stop(stop, opt_.stop.requeue,
                               opt_.stop.requeue_signal);  // requeue.hpp: the one place
           if (tracer_ != nullptr) {
             tracer_->instant(
                 fmt::format("{} {}", stop_.requeue ? "requeue on" : "stop on", signal_name(stop)),
                 SpanArgs{.step = step});
           }
           checkpoint(signal_name(stop), stop_.preemption);
           return stop;
         }});
  c.add({"evaluation", k.eval_every, [this](std::int64_t) {
           stop_clock();
           // Collective: every rank evaluates its shard; the sums are all-reduced.
           const EvalResult e = evaluate();
           report_.eval(position(), e);
           consider_best(e);  // --keep-best: a new best is checkpointed right below
           clock_.start();
           return 0;
         }});
  c.add({"checkpoint", 1, [this](std::int64_t step) {
           // --checkpoint-every's, or the new best the evaluation above found (--keep-best).
           const bool every = opt_.checkpoint.every > 0 && step % opt_.checkpoint.every == 0;
           if (!every && !rec_.best_due) return 0;
           stop_clock();
           checkpoint(every ? "every" : "best");  // collective: rank 0 writes, all agree
           clock_.start();
           return 0;
         }});
  return c;
}

EvalResult Trainer::end_epoch(bool epoch_done) {
  stop_clock();
  if (rec_.window_images > 0) log_window();
  report_.comm_epoch(
      position(), CommFigures{engine_.reducer().take_stats(), std::exchange(rec_.micro_batches, 0),
                              engine_.reducer().buckets().size(), model_comm_.transport(),
                              ops_.device() == Device::Cuda});
  if (engine_.phases().steps() > 0) {
    const std::size_t steps = engine_.phases().steps();  // before take_medians() clears them
    report_.step_phases(
        position(), steps, engine_.phases().take_medians(),
        engine_.host_timed()
            ? std::string("host clocks")
            : fmt::format("timed by CUDA events on every {}th step", kGpuPhaseSampleEvery));
  }
  const EvalResult e = evaluate();
  report_.epoch(position(), epoch_done, e, rec_.images / std::max(clock_.seconds(), 1e-9),
                comm_.payload_bytes());
  consider_best(e);  // kept by the checkpoint that follows (the epoch's end, or the run's)
  return e;
}

void Trainer::watch_stragglers(std::vector<RankPlacement> ranks) {
  if (opt_.cadence.straggler_every == 0) return;
  if (engine_.graphs() != nullptr && (tracer_ == nullptr || !tracer_->on())) {
    // A graph replay runs no host code and, without --trace, records no CUDA events: the monitor
    // would see no compute at all (first GPU run: a node table of 0.00 ms/step).
    log_.info(
        "straggler watch off: CUDA graph replays are not timed per phase without --trace; "
        "--trace FILE or --cuda-graphs off turns it on");
    return;
  }
  stragglers_ =
      std::make_unique<StragglerMonitor>(opt_.cadence.straggler_threshold, std::move(ranks));
  engine_.set_stragglers(stragglers_.get());  // each step's compute time goes to it
}

TrainResult Trainer::run() {
  TrainResult res;
  DistributedSampler sampler(data_.train.count, comm_.rank(), comm_.size(), opt_.schedule.shuffle,
                             opt_.schedule.seed, opt_.schedule.drop_last);
  const std::int64_t first_step = rec_.step;
  const RunCadence cadence = make_cadence(first_step);
  int stop = 0;
  while (rec_.epoch < opt_.schedule.epochs && rec_.step < total_steps_) {
    sampler.set_epoch(rec_.epoch);
    const std::vector<std::int64_t> order = sampler.indices();
    const auto epoch_size = static_cast<std::int64_t>(order.size());
    // Once per epoch: the backend keeps the order next to the data (no per-step upload).
    ops_.set_order(Ops::kTrainSplit, order);
    const std::int64_t epoch_first = rec_.offset;
    clock_.start();
    while (rec_.offset < epoch_size && rec_.step < total_steps_ && stop == 0) {
      if (flight_ != nullptr) flight_->set_step(rec_.step);
      debug_seams_before_step(opt_.seams, comm_, rec_.step);
      engine_.run_step(micro_batch_sizes(rec_.offset, epoch_size, opt_.schedule.batch_size,
                                         opt_.schedule.accumulate),
                       learning_rate(opt_.optimizer.lr, rec_.step, rec_.epoch), rec_);
      stop = cadence.after_step(rec_.step);
    }
    if (!opt_.seams.sample_log.empty()) {
      // Collective (agreement): a log that cannot be written on one rank stops every rank.
      run_agreed(comm_, [&] {
        append_sample_log(opt_.seams.sample_log, rec_.epoch, comm_.rank(), order, epoch_first,
                          rec_.offset);
      });
    }
    if (stop != 0) break;
    const bool epoch_done = rec_.offset >= epoch_size;
    res.final_eval = end_epoch(epoch_done);
    res.evaluated = true;
    if (!epoch_done) break;  // --max-steps ended the run inside this epoch
    res.epochs_completed = static_cast<int>(rec_.epoch + 1);
    // The checkpoint of a finished epoch points at the start of the next one.
    ++rec_.epoch;
    rec_.offset = 0;
    checkpoint("epoch end");
  }
  if (engine_.graphs() != nullptr)
    report_.graphs(engine_.graphs()->captured(), rec_.replays, rec_.micro_runs);
  if (stragglers_) {
    if (rec_.step % opt_.cadence.straggler_every != 0) {
      // Collective (one allgather, the same decision on every rank: all stop at the same step):
      // the last, partial window is scored too, so a run shorter than one window (8 steps at
      // --straggler-every 10) still measures every node.
      for (const StragglerEvent& e : stragglers_->end_window(comm_))
        report_.straggler(position(), e, stragglers_->ranks(), stragglers_->threshold());
    }
    report_.node_table(stragglers_->node_table(), stragglers_->threshold());
  }
  // End of training (a no-op when the epoch end just wrote this step).
  if (stop == 0) checkpoint("end");
  res.stop_signal = stop;
  res.stop = stop_;
  res.steps = rec_.step;
  res.train_seconds = clock_.seconds();
  res.images_per_second = rec_.images / std::max(res.train_seconds, 1e-9);
  res.comm_bytes = comm_.payload_bytes();
  res.last_checkpoint = last_checkpoint_;
  res.totals = totals();
  return res;
}

}  // namespace mnist_ddp
