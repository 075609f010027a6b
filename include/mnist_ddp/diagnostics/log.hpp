// log.hpp — rank 0's console + file log (spdlog), the JSONL metrics file (nlohmann-json), and the
// live progress line on a TTY. Other ranks only print their identity line and errors.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace spdlog {
class logger;
}

namespace mnist_ddp {

// metrics.jsonl's schema version, in every record as "schema" (docs/outputs.md: its fields and
// units). 2: the run's totals (wall_s, train_s, images_seen) on every training, evaluation and
// checkpoint record, time_s gone; 1 (no "schema" field): before.
inline constexpr int kMetricsSchema = 2;

// How rank 0 opens the log directory's files: appended to (a run after earlier runs in the same
// --log-dir: their records stay, tools/compare_runs reads each run id as its own run), emptied
// first (--clear-logs), or not at all (a dry run or evaluation beside the run that holds the
// directory: the console only).
enum class LogFiles { Append, Truncate, None };

class Logger {
 public:
  // Rank 0 creates log_dir and opens mnist_train.log and metrics.jsonl as `files` says
  // (UserError if it cannot). Without metrics_file (--dry-run) metrics.jsonl is not touched and
  // metrics() writes nothing.
  Logger(int rank, const std::string& log_dir, bool live_progress,
         LogFiles files = LogFiles::Truncate, bool metrics_file = true);
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  bool is_root() const { return rank_ == 0; }
  bool live_progress() const { return live_; }
  // A line on rank 0's console and in the log file.
  void info(const std::string& line);
  // A line only in the log file (nothing with LogFiles::None).
  void file(const std::string& line);
  // A warning: `mnist_ddp: warning: LINE` on rank 0's stderr (warnings and errors go to stderr,
  // progress and results to stdout), and `warning: LINE` in the log file.
  void warn(const std::string& line);
  // One JSON object per line in metrics.jsonl, with "schema": kMetricsSchema added (flushed, so a
  // killed job keeps its metrics).
  void metrics(const nlohmann::json& record);
  // Rewrites the live progress line (TTY only; no-op otherwise).
  void progress(const std::string& line);
  // Where the files are (or, with LogFiles::None or without metrics_file, would be).
  std::string log_path() const { return log_path_; }
  std::string metrics_path() const { return metrics_path_; }

 private:
  void clear_progress();
  int rank_;
  bool live_;
  bool progress_shown_ = false;
  std::string log_path_, metrics_path_;
  std::shared_ptr<spdlog::logger> console_, file_;
  std::ofstream metrics_;
};

}  // namespace mnist_ddp
