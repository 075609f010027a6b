// trace.hpp — the timeline (--trace): spans on two tracks per rank (compute: step, data, forward
// and backward per layer, loss, the exposed wait for the gradients, the optimizer, evaluation,
// checkpoints; communication: every bucket's all-reduce from launch to completion) in a bounded
// window of steps (--trace-steps), written as one Chrome trace-event file (trace_file.hpp).
//
// A span's ends are stamps of a StampClock: host time on the CPU; on a GPU, CUDA events on the
// compute stream (recorded as graph nodes while a step is captured, so graph replays are timed
// too), read back when the step ends; a bucket's all-reduce ends on the communicator's own stream
// (NCCL). On a GPU the compute span names also go out as NVTX ranges (nsys, ncu) whether or not
// --trace is on, for the steps whose host code runs (eager and captured; a graph replay runs none,
// and nsys shows its kernels). Off and outside the window a span costs one branch.
//
// Chrome trace "X" events on one thread must nest, and the buckets' all-reduces overlap each
// other: the communication track is one lane (thread) per bucket, plus one for the whole
// reduction without overlap.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mnist_ddp/base/enum_names.hpp"

namespace mnist_ddp {

enum class Track { Compute, Comm };
inline constexpr std::array<NameOf<Track>, 2> kTrackNames{
    {{Track::Compute, "compute"}, {Track::Comm, "communication"}}};

// Points in time on one rank's timeline, in microseconds since the clock's origin.
class StampClock {
 public:
  virtual ~StampClock() = default;
  // A point in time now (host) or when the compute stream gets here (GPU). Returns its id, or -1
  // when no time can be taken (a GPU stream whose capture a failed call has invalidated).
  virtual int stamp() = 0;
  // The same on another stream (a cudaStream_t: NCCL's, where a bucket's all-reduce ends);
  // nullptr, or a host clock: stamp().
  virtual int stamp_on(void* /*stream*/) { return stamp(); }
  // Microseconds since the origin of stamps[i]; a GPU clock waits for them first. Between steps.
  virtual std::vector<double> times_us(const std::vector<int>& stamps) = 0;
  // Stamp ids may be reused from here on (the previous step's are read).
  virtual void reset() = 0;
  // Host time now, microseconds since the same origin (events outside steps).
  virtual double now_us() const = 0;
  // The origin as wall-clock time (microseconds since the Unix epoch), read together with the
  // monotonic origin: the ranks' timelines are aligned by it (exactly on one host; across hosts
  // as well as their clocks are synchronised, NTP or PTP).
  virtual double origin_unix_us() const = 0;
  // NVTX ranges (GPU clocks; no-ops on the host).
  virtual void range_push(const char* /*name*/) {}
  virtual void range_pop() {}
  virtual bool has_ranges() const { return false; }
};

// Host stamps: steady_clock, origin now.
double unix_now_us();
std::unique_ptr<StampClock> make_host_stamp_clock();

// The steps traced: [first, last) of the step counter. Parsed from --trace-steps "A:B".
struct TraceWindow {
  std::int64_t first = 0;
  std::int64_t last = 0;
  bool contains(std::int64_t step) const { return step >= first && step < last; }
};
// "A:B" with 0 <= A < B; nullopt for anything else.
std::optional<TraceWindow> parse_trace_window(const std::string& text);
// The default window: 50 steps after 10 warm-up steps of this run (which may start at a resumed
// step), clipped to the steps the run will take.
TraceWindow default_trace_window(std::int64_t first_step, std::int64_t total_steps);

// What a span says about itself (Chrome's "args"); -1 / nullptr: not given.
struct SpanArgs {
  std::int64_t step = -1;
  const char* layer = nullptr;  // the module's PyTorch name: "layer1", "layer2", "fc"
  int bucket = -1;
  std::int64_t bytes = -1;
  int batch = -1;
  const char* hook = nullptr;
};

// The communication lanes: bucket b's all-reduces on lane b, the whole reduction without overlap
// (--no-overlap) on kArenaLane.
inline constexpr int kArenaLane = 3;
// The Chrome thread id of a span: 0 compute, 1 + lane communication.
int trace_tid(Track track, int bucket);

// One finished span or instant, as written to the file.
struct TraceEvent {
  std::string name;
  Track track = Track::Compute;
  double ts_us = 0;
  double dur_us = -1;  // < 0: an instant
  SpanArgs args;
  std::string hook;  // args.hook, owned
};

class Tracer {
 public:
  // clock: where stamps come from (outlives the tracer). on: --trace given (else only NVTX).
  Tracer(StampClock& clock, bool on, TraceWindow window);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;
  bool on() const { return on_; }
  const TraceWindow& window() const { return window_; }
  void set_window(TraceWindow w) { window_ = w; }

  // A training step begins. capturable: the body may be captured in a CUDA graph (then its spans
  // are kept as the graph's template even outside the window: replays run no host code).
  void begin_step(std::int64_t step, bool capturable);
  // Opens a span (returns its handle, -1 when not recording) / closes it, with the track it was
  // opened on. Inside a step. Compute spans nest (they are NVTX ranges too); communication spans
  // overlap them and are not NVTX ranges.
  int open(const char* name, Track track, SpanArgs args = {});
  void close(int span, Track track = Track::Compute);
  // Closes a span at the point `stream` reaches (a GPU communicator's stream): the all-reduce
  // just enqueued there ends the span when it completes.
  void close_on(int span, void* stream);
  // Unwinding (an exception left the span's scope): no stamp, only the NVTX range ends.
  void abandon(int span, Track track);
  // A failure while closing a span from a destructor, kept until end_step rethrows it (a
  // destructor cannot); forgotten with the spans of a failed capture (rewind).
  void defer(std::exception_ptr error) { deferred_ = error; }
  // What an open span learned later (a bucket's bytes, known once its hook has started).
  void set_bytes(int span, std::int64_t bytes);
  // The step (or micro-batch) ended; how it ran: eager, captured (and launched), replayed. key:
  // its graph's key (StepGraphs: batch size and micro-batch kind).
  enum class Ran { Eager, Captured, Replayed };
  void end_step(Ran how, std::int64_t key);

  // Outside steps (evaluation, checkpoints): host-timed spans, recorded whenever --trace is on.
  int open_host(const char* name, SpanArgs args = {});
  void close_host(int span);
  // A moment (stop, requeue), recorded whenever --trace is on.
  void instant(const std::string& name, SpanArgs args = {});

  // A CUDA graph capture that failed part-way: its spans are forgotten (rewind to the mark taken
  // before it), so the eager rerun's are the step's.
  std::size_t mark() const { return spans_.size(); }
  void rewind(std::size_t mark);

  // Sampling for the step-time breakdown (a GPU's host clocks would only time the enqueue): every
  // `every`-th step after step 0 is timed (one stream sync) when its stamps exist: an eager step
  // always, a graph replay only with --trace (the captured step's stamps are graph nodes then; a
  // graph without them costs nothing extra per replay); 0: off.
  void sample_every(std::int64_t every) { sample_every_ = every; }
  // The timed spans of the sampled step (or micro-batch) just ended, once; false when it was not
  // sampled.
  bool take_sample(std::vector<TraceEvent>& out);

  const std::vector<TraceEvent>& events() const { return events_; }
  double origin_unix_us() const { return clock_.origin_unix_us(); }

 private:
  struct Span {
    std::string name;
    Track track;
    SpanArgs args;
    std::string hook;
    int begin = -1, end = -1;  // stamp ids
  };
  // The spans' times, as events (read from the clock: a GPU clock waits for them).
  std::vector<TraceEvent> resolve(const std::vector<Span>& spans);
  StampClock& clock_;
  bool ranges_;  // the clock's NVTX ranges (asked once: off, a span costs one branch)
  bool on_;
  TraceWindow window_;
  bool recording_ = false;  // spans of this step are kept
  bool in_window_ = false;  // ... and written
  std::int64_t sample_every_ = 0;
  bool sampled_ = false;  // this step is timed for the breakdown
  bool has_sample_ = false;
  std::vector<TraceEvent> sample_;
  std::int64_t step_ = 0;
  std::vector<Span> spans_;                              // this step's
  std::map<std::int64_t, std::vector<Span>> templates_;  // key -> the captured step's spans
  std::exception_ptr deferred_;
  std::vector<TraceEvent> events_;
};

// RAII span: opens on construction, closes on destruction (also when unwinding). tracer may be
// nullptr.
class TraceScope {
 public:
  TraceScope(Tracer* tracer, const char* name, Track track, SpanArgs args = {});
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  Tracer* tracer_;
  int span_;
  Track track_;
  int exceptions_;  // std::uncaught_exceptions() when opened
};

// RAII host span outside steps (open_host / close_host). tracer may be nullptr.
class HostTraceScope {
 public:
  HostTraceScope(Tracer* tracer, const char* name, SpanArgs args = {});
  ~HostTraceScope();
  HostTraceScope(const HostTraceScope&) = delete;
  HostTraceScope& operator=(const HostTraceScope&) = delete;

 private:
  Tracer* tracer_;
  int span_;
};

}  // namespace mnist_ddp
