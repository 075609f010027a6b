// step_engine.cpp — one optimizer step, assembled and run (step_engine.hpp): the engine's
// construction (the Reducer, SyncBN, CUDA graphs, the loss scaler, the buffers) and the step.
#include "mnist_ddp/train/step_engine.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "mnist_ddp/comm/agree.hpp"
#include "mnist_ddp/comm/replicas.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
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

std::int64_t step_graph_key(int n, const MicroBatch& mb) {
  // kind: 0 the only micro-batch, 1 the first of several, 2 a middle one, 3 the last.
  const int kind = mb.count == 1 ? 0 : mb.first() ? 1 : mb.last() ? 3 : 2;
  return ((static_cast<std::int64_t>(n) << 24) | (static_cast<std::int64_t>(mb.count) << 2)) | kind;
}

StepEngine::StepEngine(const TrainOptions& options, const TrainerComms& comms, Ops& ops,
                       ConvNet& model, const DataSplit& data, Reporter& report, Logger& log,
                       Tracer* tracer)
    : opt_(options),
      comm_(comms.control),
      model_comm_(comms.model),
      local_comm_(comms.local),
      tracer_(tracer),
      ops_(ops),
      model_(model),
      data_(data),
      report_(report),
      sgd_(ops, model.params().size(), options.optimizer.sgd) {
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
  if (opt_.schedule.accumulate > 1) {
    grad_sum_ = Tensor({static_cast<int>(model.grads().size())}, ops.device());  // zeroed
  }
  y_ = reinterpret_cast<std::int32_t*>(
      ops.alloc_bytes(static_cast<std::size_t>(max_batch) * sizeof(std::int32_t)));
}

StepEngine::~StepEngine() {
  model_.set_tracer(nullptr);
  if (opt_.gradients.sync_bn) ops_.set_bn_sync(nullptr);
  if (opt_.gradients.amp != AmpMode::Off) ops_.set_amp(AmpMode::Off, nullptr, nullptr);
  ops_.free_bytes(reinterpret_cast<std::uint8_t*>(y_));
}

void StepEngine::run_step(const std::vector<int>& sizes, double lr, RunRecord& rec) {
  rec.last_lr = lr;
  if (time_phases_) phases_.begin();
  const int count = static_cast<int>(sizes.size());
  PhaseSeconds sampled{};  // GPU: the step's phases from its CUDA events, when sampled
  bool was_sampled = false;
  for (int i = 0; i < count; ++i) {
    const int n = sizes[static_cast<std::size_t>(i)];
    const MicroBatch mb{i, count};
    const std::int64_t key = step_graph_key(n, mb);
    // Before the micro-batch (outside any graph): what changes per step, into backend memory.
    ops_.set_step_scalars({rec.offset, lr, sgd_.steps_taken() == 0});
    const auto body = [&] { enqueue(n, mb, rec.step); };
    if (tracer_ != nullptr)
      tracer_->begin_step(rec.step, graphs_ != nullptr && graphs_->will_capture(key));
    Tracer::Ran ran = Tracer::Ran::Eager;
    if (!graphs_) {
      body();
    } else if (const StepRun how = graphs_->run(key, body); how == StepRun::Replayed) {
      ++rec.replays;
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
    // The host-side accounting of the micro-batch just run, however it ran (a graph replay runs
    // no host code): BN's num_batches_tracked, the position, the window.
    model_.count_train_batch();  // BN counts every forward, as PyTorch's
    rec.offset += n;
    rec.window_images += n;
    rec.images += static_cast<std::int64_t>(n) * comm_.size();
    ++rec.micro_batches;
    ++rec.micro_runs;
  }
  if (was_sampled) {
    phases_.add(sampled);
    if (stragglers_) stragglers_->add(sampled);  // GPU: the sampled steps' CUDA-event split
  }
  // The step's: its phases, and the step counter with what counts steps (the optimizer's, the
  // Reducer's bytes).
  if (time_phases_) {
    phases_.end();
    if (stragglers_) stragglers_->add(phases_.last());
  }
  sgd_.count_step();
  reducer_->count_step();
  ++rec.step;
}

void StepEngine::enqueue(int n, const MicroBatch& mb, std::int64_t step) {
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
    reducer_->use_comm(opt_.gradients.local_sgd.local_at(step) ? *local_comm_ : *bucket_comm_);
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
  if (opt_.gradients.local_sgd.average_after(step)) {
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

void StepEngine::mark(Phase p) {
  if (opt_.seams.slow) debug_slow_phase(*opt_.seams.slow, comm_.rank(), p);  // a test seam
  if (time_phases_) phases_.mark(p);
}

CaptureHooks StepEngine::capture_hooks() {
  CaptureHooks h;
  // The step body counts nothing on the host (run_step does, after it): only the Reducer's and
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

}  // namespace mnist_ddp
