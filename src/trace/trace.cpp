// trace.cpp — the timeline's recording: the window, host stamps, spans and their templates for
// graph replays.
#include "mnist_ddp/trace/trace.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <utility>

namespace mnist_ddp {
namespace {

class HostStampClock final : public StampClock {
 public:
  int stamp() override {
    stamps_.push_back(now_us());
    return static_cast<int>(stamps_.size()) - 1;
  }
  std::vector<double> times_us(const std::vector<int>& ids) override {
    std::vector<double> out;
    out.reserve(ids.size());
    for (const int id : ids) out.push_back(stamps_[static_cast<std::size_t>(id)]);
    return out;
  }
  void reset() override { stamps_.clear(); }
  double now_us() const override {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
        .count();
  }
  double origin_unix_us() const override { return origin_unix_us_; }

 private:
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  double origin_unix_us_ = unix_now_us();
  std::vector<double> stamps_;
};

bool parse_int(std::string_view s, std::int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size() && !s.empty();
}

}  // namespace

double unix_now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<StampClock> make_host_stamp_clock() {
  return std::make_unique<HostStampClock>();
}

std::optional<TraceWindow> parse_trace_window(const std::string& text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) return std::nullopt;
  TraceWindow w;
  const std::string_view all(text);
  if (!parse_int(all.substr(0, colon), w.first) || !parse_int(all.substr(colon + 1), w.last)) {
    return std::nullopt;
  }
  if (w.first < 0 || w.last <= w.first) return std::nullopt;
  return w;
}

TraceWindow default_trace_window(std::int64_t first_step, std::int64_t total_steps) {
  constexpr std::int64_t kWarmup = 10, kSteps = 50;
  TraceWindow w{first_step + kWarmup, first_step + kWarmup + kSteps};
  if (w.last > total_steps) {
    // A short run: the steps it has, still skipping what warm-up it can.
    w.last = total_steps;
    w.first = std::min(w.first, std::max(first_step, total_steps - kSteps));
  }
  return w;
}

Tracer::Tracer(StampClock& clock, bool on, TraceWindow window)
    : clock_(clock), ranges_(clock.has_ranges()), on_(on), window_(window) {}

void Tracer::begin_step(std::int64_t step, bool capturable) {
  step_ = step;
  in_window_ = on_ && window_.contains(step);
  // Step 0 is never a sample (its first-use costs: cuDNN plans, workspace). A captured step is a
  // replay template only with --trace: its stamps become nodes of the graph, which every replay
  // would pay for; without --trace, replays are not timed (the sample stays empty).
  sampled_ = sample_every_ > 0 && step > 0 && step % sample_every_ == 0 && (on_ || !capturable);
  recording_ = in_window_ || sampled_ || (on_ && capturable);
  spans_.clear();
}

bool Tracer::take_sample(std::vector<TraceEvent>& out) {
  if (!has_sample_) return false;
  out = std::move(sample_);
  sample_.clear();
  has_sample_ = false;
  return true;
}

int trace_tid(Track track, int bucket) {
  if (track == Track::Compute) return 0;
  return 1 + (bucket >= 0 && bucket < kArenaLane ? bucket : kArenaLane);
}

int Tracer::open(const char* name, Track track, SpanArgs args) {
  if (track == Track::Compute && ranges_) clock_.range_push(name);
  if (!recording_) return -1;
  Span s{name, track, args, args.hook != nullptr ? args.hook : "", clock_.stamp(), -1};
  spans_.push_back(std::move(s));
  return static_cast<int>(spans_.size()) - 1;
}

void Tracer::close(int span, Track track) {
  if (track == Track::Compute && ranges_) clock_.range_pop();
  if (span < 0 || !recording_ || static_cast<std::size_t>(span) >= spans_.size()) return;
  spans_[static_cast<std::size_t>(span)].end = clock_.stamp();
}

void Tracer::close_on(int span, void* stream) {
  if (span < 0 || !recording_ || static_cast<std::size_t>(span) >= spans_.size()) return;
  spans_[static_cast<std::size_t>(span)].end = clock_.stamp_on(stream);
}

void Tracer::abandon(int /*span*/, Track track) {
  if (track == Track::Compute && ranges_) clock_.range_pop();
}

void Tracer::set_bytes(int span, std::int64_t bytes) {
  if (span >= 0 && recording_) spans_[static_cast<std::size_t>(span)].args.bytes = bytes;
}

void Tracer::end_step(Ran how, std::int64_t n) {
  if (deferred_) std::rethrow_exception(std::exchange(deferred_, nullptr));
  if (!recording_) return;
  // A captured step's stamps are nodes of its graph: each replay records them again.
  if (how == Ran::Captured) templates_[n] = spans_;
  if (in_window_ || sampled_) {
    const std::vector<Span>* spans = &spans_;
    if (how == Ran::Replayed) {
      const auto t = templates_.find(n);
      spans = t != templates_.end() ? &t->second : nullptr;
    }
    if (spans != nullptr) {
      std::vector<TraceEvent> timed = resolve(*spans);
      if (sampled_) {
        sample_ = timed;
        has_sample_ = true;
      }
      if (in_window_) {
        for (TraceEvent& e : timed) events_.push_back(std::move(e));
      }
    }
  }
  // The step's stamps are read: their ids may be reused. (Stamps recorded inside a graph are its
  // nodes; a GPU clock never hands them out again: device_stamps.cu.)
  clock_.reset();
  spans_.clear();
  recording_ = false;
}

void Tracer::rewind(std::size_t mark) {
  if (spans_.size() > mark) spans_.resize(mark);
  deferred_ = nullptr;
}

std::vector<TraceEvent> Tracer::resolve(const std::vector<Span>& spans) {
  std::vector<TraceEvent> out;
  std::vector<int> ids;
  ids.reserve(spans.size() * 2);
  std::vector<const Span*> kept;  // spans with both ends stamped
  for (const Span& s : spans) {
    if (s.begin < 0 || s.end < 0) continue;
    ids.push_back(s.begin);
    ids.push_back(s.end);
    kept.push_back(&s);
  }
  const std::vector<double> t = clock_.times_us(ids);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const Span& span = *kept[i];
    TraceEvent e;
    e.name = span.name;
    e.track = span.track;
    e.ts_us = t[2 * i];
    e.dur_us = std::max(0.0, t[2 * i + 1] - t[2 * i]);
    e.args = span.args;
    e.args.step = step_;  // a graph's template was recorded at another step
    e.hook = span.hook;
    out.push_back(std::move(e));
  }
  return out;
}

int Tracer::open_host(const char* name, SpanArgs args) {
  if (ranges_) clock_.range_push(name);
  if (!on_) return -1;
  TraceEvent e;
  e.name = name;
  e.ts_us = clock_.now_us();
  e.dur_us = 0;
  e.args = args;
  events_.push_back(std::move(e));
  return static_cast<int>(events_.size()) - 1;
}

void Tracer::close_host(int span) {
  if (ranges_) clock_.range_pop();
  if (span < 0) return;
  TraceEvent& e = events_[static_cast<std::size_t>(span)];
  e.dur_us = std::max(0.0, clock_.now_us() - e.ts_us);
}

void Tracer::instant(const std::string& name, SpanArgs args) {
  if (!on_) return;
  TraceEvent e;
  e.name = name;
  e.ts_us = clock_.now_us();
  e.dur_us = -1;
  e.args = args;
  events_.push_back(std::move(e));
}

TraceScope::TraceScope(Tracer* tracer, const char* name, Track track, SpanArgs args)
    : tracer_(tracer), span_(-1), track_(track), exceptions_(std::uncaught_exceptions()) {
  if (tracer_ != nullptr) span_ = tracer_->open(name, track, args);
}

TraceScope::~TraceScope() {
  if (tracer_ == nullptr) return;
  if (std::uncaught_exceptions() > exceptions_) {
    // Unwinding (a failed call inside a CUDA graph capture, say): no device call on a stream
    // that may be unusable; the failure being thrown is the one to report.
    tracer_->abandon(span_, track_);
    return;
  }
  try {
    tracer_->close(span_, track_);
  } catch (...) {
    tracer_->defer(std::current_exception());
  }
}

HostTraceScope::HostTraceScope(Tracer* tracer, const char* name, SpanArgs args)
    : tracer_(tracer), span_(-1) {
  if (tracer_ != nullptr) span_ = tracer_->open_host(name, args);
}

HostTraceScope::~HostTraceScope() {
  if (tracer_ != nullptr) tracer_->close_host(span_);
}

}  // namespace mnist_ddp
