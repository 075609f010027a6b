// trainer.cpp — the training loop (the step, its phases and graphs), evaluation, metrics and
// progress; the checkpoint state is trainer_checkpoint.cpp.
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
std::vector<int> micro_batch_sizes(std::int64_t offset, std::int64_t epoch_size, int batch,
                                   int accumulate) {
  std::vector<int> sizes;
  for (int i = 0; i < accumulate && offset < epoch_size; ++i) {
    const auto n = static_cast<int>(std::min<std::int64_t>(batch, epoch_size - offset));
    sizes.push_back(n);
    offset += n;
  }
  return sizes;
}

namespace {

// What the flags leave to the program, resolved once on the trainer's own copy of its options.
TrainOptions resolved(TrainOptions o) {
  if (o.cadence.straggler_every < 0) o.cadence.straggler_every = o.cadence.log_every;
  o.gradients.powersgd.seed = o.schedule.seed;  // the same Q draws on every rank
  o.optimizer.sgd.lr = o.optimizer.lr.base_lr;  // each step's rate: learning_rate(), below
  return o;
}

}  // namespace

std::int64_t step_graph_key(int n, const MicroBatch& mb) {
  // kind: 0 the only micro-batch, 1 the first of several, 2 a middle one, 3 the last.
  const int kind = mb.count == 1 ? 0 : mb.first() ? 1 : mb.last() ? 3 : 2;
  return ((static_cast<std::int64_t>(n) << 24) | (static_cast<std::int64_t>(mb.count) << 2)) | kind;
}

Trainer::Trainer(const TrainOptions& options, std::string stored_config, const TrainerComms& comms,
                 Ops& ops, ConvNet& model, const DataSplit& data, Logger& log, Tracer* tracer)
    : opt_(resolved(options)),
      comm_(comms.control),
      model_comm_(comms.model),
      local_comm_(comms.local),
      flight_(comms.flight),
      tracer_(tracer),
      ops_(ops),
      model_(model),
      data_(data),
      log_(log),
      report_(opt_.schedule, opt_.gradients, log),
      sgd_(ops, model.params().size(), opt_.optimizer.sgd),
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
  const CommPlan& plan = comms.plan;
  // The plan was made for this device and world; the communicators it opened must match it (a
  // GPU's Reducer works on device memory exactly when the collectives take it).
  MNIST_DDP_CHECK(plan.device_reducer() == (ops.device() == Device::Cuda) &&
                      plan.device_reducer() == model_comm_.device_memory(),
                  "the communication plan and the model communicator disagree on device memory");
  MNIST_DDP_CHECK(!plan.graphs || model_comm_.capturable(),
                  "CUDA graphs planned on a model communicator that cannot be captured");
  // Host clocks time a CPU step; a GPU step's host code only enqueues (or is a graph replay), so
  // the timeline's CUDA events time every kGpuPhaseSampleEvery-th step instead (one sync each):
  // eager steps always, graph replays with --trace (trace.hpp).
  time_phases_ = ops.device() == Device::Cpu;
  if (!time_phases_ && tracer != nullptr) tracer->sample_every(kGpuPhaseSampleEvery);
  // Where the buckets are reduced. GPU: the model communicator (NCCL on its own stream while the
  // compute stream goes on with the earlier layers; host-staged MPI: blocking, through the
  // host). CPU: the model communicator (MPI_Test from backward), or the communication thread.
  bucket_comm_ = &model_comm_;
  if (plan.thread_engine) {
    MNIST_DDP_CHECK(comms.thread != nullptr && comms.thread->size() == model_comm_.size(),
                    "the communication thread needs its own communicator over the same ranks");
    bucket_comm_ = comms.thread;
  }
  const GradientOptions& grads = opt_.gradients;
  reducer_ = std::make_unique<Reducer>(*bucket_comm_, model,
                                       static_cast<std::size_t>(grads.bucket_cap_kb) * 1024,
                                       grads.overlap, grads.compression, grads.powersgd);
  reducer_->set_tracer(tracer);
  model.set_tracer(tracer);
  if (grads.sync_bn) {
    // The exchange works on host doubles: the model communicator on the CPU, the host MPI
    // communicator on a GPU (where the model communicator works on device memory).
    bn_sync_ = make_sync_bn(ops.device() == Device::Cuda ? comm_ : model_comm_);
    ops.set_bn_sync(&bn_sync_);
  }
  MNIST_DDP_CHECK(plan.local_sgd == LocalSgdComm::None || local_comm_ != nullptr,
                  "post-local SGD needs the node-local group");
  if (plan.graphs) {
    graphs_ = ops.make_step_graphs(capture_hooks(), opt_.seams.fail_capture);
  } else if (!plan.why_no_graphs.empty()) {
    log.info("CUDA graphs off: " + plan.why_no_graphs);
  }
  if (!plan.why_no_thread.empty()) {
    log.info("communication thread off: " + plan.why_no_thread);
  }
  if (grads.amp != AmpMode::Off) {
    // Mixed precision: bf16 needs no loss scale (fp32's exponent range); fp16 gets the scaler,
    // whose scale multiplies the loss gradient and whose found-inf flag can skip SGD.
    if (grads.amp == AmpMode::Fp16) scaler_ = ops.make_grad_scaler(LossScaleRule{});
    ops.set_amp(grads.amp, scaler_ ? scaler_->scale() : nullptr,
                scaler_ ? scaler_->found_inf() : nullptr);
  }
  const int max_batch = model.max_batch();
  x_ = Tensor({max_batch, kImagePixels}, ops.device());
  dlogits_ = Tensor({max_batch, kClasses}, ops.device());
  if (sched.accumulate > 1) {
    grad_sum_ = Tensor({static_cast<int>(model.grads().size())}, ops.device());  // zeroed
  }
  y_ = reinterpret_cast<std::int32_t*>(
      ops.alloc_bytes(static_cast<std::size_t>(max_batch) * sizeof(std::int32_t)));
}

Trainer::~Trainer() {
  model_.set_tracer(nullptr);
  if (opt_.gradients.sync_bn) ops_.set_bn_sync(nullptr);
  if (opt_.gradients.amp != AmpMode::Off) ops_.set_amp(AmpMode::Off, nullptr, nullptr);
  ops_.free_bytes(reinterpret_cast<std::uint8_t*>(y_));
}

void Trainer::train_step(const std::vector<int>& sizes) {
  last_lr_ = learning_rate(opt_.optimizer.lr, step_, epoch_);
  if (time_phases_) phases_.begin();
  const int count = static_cast<int>(sizes.size());
  PhaseSeconds sampled{};  // GPU: the step's phases from its CUDA events, when sampled
  bool was_sampled = false;
  for (int i = 0; i < count; ++i) {
    const int n = sizes[static_cast<std::size_t>(i)];
    const MicroBatch mb{i, count};
    const std::int64_t key = step_graph_key(n, mb);
    // Before the micro-batch (outside any graph): what changes per step, into backend memory.
    ops_.set_step_scalars({offset_, last_lr_, sgd_.steps_taken() == 0});
    const auto body = [&] { enqueue_step(n, mb); };
    if (tracer_ != nullptr)
      tracer_->begin_step(step_, graphs_ != nullptr && graphs_->will_capture(key));
    Tracer::Ran ran = Tracer::Ran::Eager;
    if (!graphs_) {
      body();
    } else if (const StepRun how = graphs_->run(key, body); how == StepRun::Replayed) {
      ++replays_;
      ran = Tracer::Ran::Replayed;
    } else if (how == StepRun::Captured) {
      ran = Tracer::Ran::Captured;
    } else if (how == StepRun::FellBack) {
      report_.capture_fell_back(n, graphs_->last_failure());
    }
    // Sync (GPU, traced and sampled steps only): the micro-batch's CUDA events are read here.
    if (tracer_ != nullptr) {
      tracer_->end_step(ran, key);
      if (std::vector<TraceEvent> spans; tracer_->take_sample(spans)) {
        const PhaseSeconds p = phase_seconds_of(spans);
        for (std::size_t k = 0; k < kPhases; ++k) sampled[k] += p[k];
        was_sampled = true;
      }
    }
    end_micro(n);
  }
  if (was_sampled) {
    phases_.add(sampled);
    if (stragglers_) stragglers_->add(sampled);  // GPU: the sampled steps' CUDA-event split
  }
  end_step();
}

void Trainer::enqueue_step(int n, const MicroBatch& mb) {
  const TraceScope step_span(tracer_, mb.last() ? "step" : "micro-batch", Track::Compute,
                             SpanArgs{.batch = n});
  {
    const TraceScope span(tracer_, "data", Track::Compute);
    ops_.gather_at_step(Ops::kTrainSplit, n, data_.mean, data_.std, x_.data(), y_);
    if (mb.first()) {
      // Collective: DDP's broadcast_buffers — rank 0's BN running statistics before the forward
      // (only the first of a step's micro-batches: DDP's forward inside no_sync does not sync
      // buffers, nor the one after it). num_batches_tracked, on the host, advances in lockstep on
      // every rank: nothing to send. A blocking collective: its time is waiting (Comm), not data.
      if (time_phases_) phases_.begin_wait();
      model_comm_.broadcast(model_.buffers(), 0);
      if (time_phases_) phases_.end_wait();
    }
  }
  mark(Phase::Data);
  const float* logits = model_.forward(x_.data(), n, Mode::Train);
  {
    const TraceScope span(tracer_, "loss", Track::Compute);
    // Mean loss over the local batch, and over the step's micro-batches; averaging the gradients
    // over ranks gives the global mean.
    ops_.accumulate_loss(n, kClasses, logits, y_, dlogits_.data(), 1.0 / (n * mb.count));
  }
  mark(Phase::Forward);
  if (!mb.last()) {
    // Inside no_sync: this micro-batch's gradients join the local sum; no collective.
    model_.backward(dlogits_.data(), nullptr);
    ops_.add_into(grad_sum_.numel(), model_.grads().data(), grad_sum_.data());
    mark(Phase::Backward);
    return;
  }
  if (opt_.gradients.local_sgd.on()) {
    // Post-local SGD (local_sgd.hpp): gradients averaged over the whole job, or within this
    // node's group.
    reducer_->use_comm(opt_.gradients.local_sgd.local_at(step_) ? *local_comm_ : *bucket_comm_);
  }
  // Collectives (inside): each bucket's all-reduce starts as soon as backward has produced its
  // gradients (with --accumulate, once the earlier micro-batches' sum has joined them); finish()
  // waits for them and leaves the average over the ranks.
  model_.backward(dlogits_.data(), [this, &mb](int layer) {
    if (mb.count > 1) {
      const auto [offset, count] = model_.layer_range(layer);
      ops_.add_into(count, grad_sum_.data() + offset, model_.grads().data() + offset);
    }
    reducer_->layer_ready(layer);
  });
  mark(Phase::Backward);
  {
    const TraceScope span(tracer_, "wait for gradients", Track::Compute);
    reducer_->finish();
  }
  mark(Phase::Comm);
  const TraceScope optimizer_span(tracer_, "optimizer", Track::Compute);
  // --amp fp16: the averaged gradients back to true scale; all ranks agree on inf/NaN.
  if (scaler_) unscale_and_agree(*scaler_, model_comm_, model_.grads());
  sgd_.step(model_.params(), model_.grads());  // a no-op where found_inf (set_amp)
  if (scaler_) scaler_->update();
  if (opt_.gradients.local_sgd.average_after(step_)) {
    // Collective: PeriodicModelAverager — the global parameter average that bounds how far the
    // node groups drift apart (momentum buffers stay local, as in PyTorch). A blocking collective:
    // its time is waiting (Comm), not optimizer compute (the straggler scores).
    if (time_phases_) phases_.begin_wait();
    model_comm_.allreduce_avg(model_.params());
    if (time_phases_) phases_.end_wait();
  }
  if (mb.count > 1) ops_.zero(grad_sum_.numel(), grad_sum_.data());  // the next step's sum
  mark(Phase::Optimizer);
}

void Trainer::mark(Phase p) {
  if (opt_.seams.slow) debug_slow_phase(*opt_.seams.slow, comm_.rank(), p);  // a test seam
  if (time_phases_) phases_.mark(p);
}

void Trainer::end_micro(int n) {
  model_.count_train_batch();  // BN counts every forward, as PyTorch's
  offset_ += n;
  window_images_ += n;
  images_ += static_cast<std::int64_t>(n) * comm_.size();
  ++micro_batches_;
  ++micro_runs_;
}

void Trainer::end_step() {
  if (time_phases_) {
    phases_.end();
    if (stragglers_) stragglers_->add(phases_.last());
  }
  sgd_.count_step();
  reducer_->count_step();
  ++step_;
}

CaptureHooks Trainer::capture_hooks() {
  CaptureHooks h;
  // The step body counts nothing on the host (end_step does, after it): only the Reducer's and
  // the model communicator's bookkeeping of the collectives it registered need putting back.
  h.save = [this] {
    before_capture_.reducer = reducer_->mark();
    before_capture_.model_comm = model_comm_.mark();
    if (tracer_ != nullptr) before_capture_.trace = tracer_->mark();
  };
  // Collective (host MPI, once per captured batch size): did every rank capture the step?
  h.agree = [this](const std::string& mine) { return agree_first_failure(comm_, mine); };
  h.restore = [this] {
    reducer_->rewind(before_capture_.reducer);
    model_comm_.rewind(before_capture_.model_comm);
    if (tracer_ != nullptr) tracer_->rewind(before_capture_.trace);
  };
  return h;
}

EvalResult Trainer::evaluate() {
  const HostTraceScope span(tracer_, "evaluate", SpanArgs{.step = step_});
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
    ops_.gather(Ops::kEvalSplit, b, n, data_.mean, data_.std, x_.data(), y_);
    const float* logits = model_.forward(x_.data(), n, Mode::Eval);
    acc[0] += ops_.softmax_cross_entropy(n, kClasses, logits, y_, nullptr, 1.0);
    acc[1] += ops_.topk_correct(n, kClasses, logits, y_, 1);
    acc[2] += ops_.topk_correct(n, kClasses, logits, y_, 5);
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
  window_loss_ += ops_.take_loss_sum();  // sync (GPU): the losses summed on the device
  // Collective (every --log-every steps on all ranks): the global mean loss of the window.
  double w[2] = {window_loss_, static_cast<double>(window_images_)};
  comm_.allreduce(std::span<double>(w, 2), ReduceOp::Sum);
  const double loss = w[1] > 0 ? w[0] / w[1] : 0.0;
  // Every rank holds the same global loss, so all stop here together. Under --amp fp16 an
  // overflowing step is skipped by the scaler (its loss may be inf): parameters are checked when
  // a checkpoint is written instead.
  if (!std::isfinite(loss) && opt_.gradients.amp != AmpMode::Fp16) {
    throw UserError(fmt::format("training diverged at step {}: the mean loss of the last {} "
                                "images is {} (lr {:g}); stopping without writing a checkpoint. {}",
                                step_, w[1], loss, last_lr_, good_checkpoint_advice()),
                    kExitTrainingDiverged);
  }
  const double elapsed = clock_.seconds();
  WindowFigures f;
  f.loss = loss;
  f.lr = last_lr_;
  // This run's global images over this run's training time (a resumed run's earlier steps and an
  // epoch's short last step count as what they were).
  f.images_per_s = elapsed > 0 ? static_cast<double>(images_) / elapsed : 0;
  f.comm_bytes = comm_.payload_bytes();
  if (scaler_) {
    // Sync (GPU, once per window): the scale and the steps skipped since the last line (every
    // rank reads the same values: the skip decision was all-reduced).
    const LossScalerState amp = scaler_->state();
    const std::int64_t skipped = scaler_->take_skipped();
    skipped_steps_ += skipped;
    f.amp = WindowFigures::Amp{amp.scale, skipped, skipped_steps_};
  }
  report_.train_window(position(), f);
  window_loss_ = 0;
  window_images_ = 0;
}

void Trainer::stop_clock() {
  window_loss_ += ops_.take_loss_sum();
  clock_.stop();
}

int Trainer::after_step(std::int64_t first_step) {
  if (opt_.cadence.check_replicas > 0 && step_ % opt_.cadence.check_replicas == 0) {
    check_replicas(comm_, model_, step_);
  }
  if (log_.live_progress() &&
      std::chrono::steady_clock::now() - last_progress_ > std::chrono::milliseconds(200)) {
    // The live progress line (a TTY): the window's loss, images/s and the ETA.
    last_progress_ = std::chrono::steady_clock::now();
    window_loss_ += ops_.take_loss_sum();
    const double elapsed = std::max(clock_.seconds(), 1e-9);
    const double rate = std::max((step_ - first_step) / elapsed, 1e-9);
    report_.progress(position(), window_images_ > 0 ? window_loss_ / window_images_ : 0.0,
                     images_ / elapsed, (total_steps_ - step_) / rate);
  }
  if (step_ % opt_.cadence.log_every == 0) log_window();
  if (stragglers_ && step_ % opt_.cadence.straggler_every == 0) {
    // Collective (one allgather per window): every rank's compute time, scored the same on all.
    for (const StragglerEvent& e : stragglers_->end_window(comm_))
      report_.straggler(position(), e, stragglers_->ranks(), stragglers_->threshold());
  }
  // Collective, every step: a stop signal on any rank stops all of them here, together.
  const int stop = agree_stop_signal(comm_);
  if (stop != 0) {
    stop_clock();
    report_.stopping(signal_name(stop), step_);
    stop_ = decide_stop(stop, opt_.stop.requeue,
                        opt_.stop.requeue_signal);  // requeue.hpp: the one place
    if (tracer_ != nullptr) {
      tracer_->instant(
          fmt::format("{} {}", stop_.requeue ? "requeue on" : "stop on", signal_name(stop)),
          SpanArgs{.step = step_});
    }
    checkpoint(signal_name(stop), stop_.preemption);
    return stop;
  }
  const bool checkpoint_due = opt_.checkpoint.every > 0 && step_ % opt_.checkpoint.every == 0;
  if (opt_.cadence.eval_every > 0 && step_ % opt_.cadence.eval_every == 0) {
    stop_clock();
    const EvalResult e = evaluate();
    report_.eval(position(), e);
    consider_best(e);  // --keep-best: a new best is checkpointed right below
    clock_.start();
  }
  if (checkpoint_due || best_due_) {
    stop_clock();
    checkpoint(checkpoint_due ? "every" : "best");  // collective: rank 0 writes, all agree
    clock_.start();
  }
  return 0;
}

EvalResult Trainer::end_epoch(bool epoch_done) {
  stop_clock();
  if (window_images_ > 0) log_window();
  report_.comm_epoch(position(),
                     CommFigures{reducer_->take_stats(), std::exchange(micro_batches_, 0),
                                 reducer_->buckets().size(), model_comm_.transport(),
                                 ops_.device() == Device::Cuda});
  if (phases_.steps() > 0) {
    const std::size_t steps = phases_.steps();  // before take_medians() clears them
    report_.step_phases(position(), steps, phases_.take_medians(),
                        time_phases_ ? std::string("host clocks")
                                     : fmt::format("timed by CUDA events on every {}th step",
                                                   kGpuPhaseSampleEvery));
  }
  const EvalResult e = evaluate();
  report_.epoch(position(), epoch_done, e, images_ / std::max(clock_.seconds(), 1e-9),
                comm_.payload_bytes());
  consider_best(e);  // kept by the checkpoint that follows (the epoch's end, or the run's)
  return e;
}

void Trainer::watch_stragglers(std::vector<RankPlacement> ranks) {
  if (opt_.cadence.straggler_every == 0) return;
  if (graphs_ && (tracer_ == nullptr || !tracer_->on())) {
    // A graph replay runs no host code and, without --trace, records no CUDA events: the monitor
    // would see no compute at all (first GPU run: a node table of 0.00 ms/step).
    log_.info(
        "straggler watch off: CUDA graph replays are not timed per phase without --trace; "
        "--trace FILE or --cuda-graphs off turns it on");
    return;
  }
  stragglers_ =
      std::make_unique<StragglerMonitor>(opt_.cadence.straggler_threshold, std::move(ranks));
}

TrainResult Trainer::run() {
  TrainResult res;
  DistributedSampler sampler(data_.train.count, comm_.rank(), comm_.size(), opt_.schedule.shuffle,
                             opt_.schedule.seed, opt_.schedule.drop_last);
  const std::int64_t first_step = step_;
  int stop = 0;
  while (epoch_ < opt_.schedule.epochs && step_ < total_steps_) {
    sampler.set_epoch(epoch_);
    const std::vector<std::int64_t> order = sampler.indices();
    const auto epoch_size = static_cast<std::int64_t>(order.size());
    // Once per epoch: the backend keeps the order next to the data (no per-step upload).
    ops_.set_order(Ops::kTrainSplit, order);
    const std::int64_t epoch_first = offset_;
    clock_.start();
    while (offset_ < epoch_size && step_ < total_steps_ && stop == 0) {
      if (flight_ != nullptr) flight_->set_step(step_);
      debug_seams_before_step(opt_.seams, comm_, step_);
      train_step(micro_batch_sizes(offset_, epoch_size, opt_.schedule.batch_size,
                                   opt_.schedule.accumulate));
      stop = after_step(first_step);
    }
    if (!opt_.seams.sample_log.empty()) {
      // Collective (agreement): a log that cannot be written on one rank stops every rank.
      run_agreed(comm_, [&] {
        append_sample_log(opt_.seams.sample_log, epoch_, comm_.rank(), order, epoch_first, offset_);
      });
    }
    if (stop != 0) break;
    const bool epoch_done = offset_ >= epoch_size;
    res.final_eval = end_epoch(epoch_done);
    res.evaluated = true;
    if (!epoch_done) break;  // --max-steps ended the run inside this epoch
    res.epochs_completed = static_cast<int>(epoch_ + 1);
    // The checkpoint of a finished epoch points at the start of the next one.
    ++epoch_;
    offset_ = 0;
    checkpoint("epoch end");
  }
  if (graphs_) report_.graphs(graphs_->captured(), replays_, micro_runs_);
  if (stragglers_) {
    if (step_ % opt_.cadence.straggler_every != 0) {
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
  res.steps = step_;
  res.train_seconds = clock_.seconds();
  res.images_per_second = images_ / std::max(res.train_seconds, 1e-9);
  res.comm_bytes = comm_.payload_bytes();
  res.last_checkpoint = last_checkpoint_;
  res.totals = totals();
  return res;
}

}  // namespace mnist_ddp
