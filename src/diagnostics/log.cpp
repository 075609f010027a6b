// log.cpp — Logger: spdlog sinks for console and file, JSONL metrics, TTY progress line.
#include "mnist_ddp/diagnostics/log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mnist_ddp/diagnostics/check.hpp"

namespace mnist_ddp {
namespace {

// A file an earlier run left without its last newline (a record cut short: a full disk, a node
// lost while writing) gets one before this run appends, so the fragment stays a line of its own
// and this run's first record starts a line (tools/metrics_jsonl.py reads around such a line).
void end_last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in || in.tellg() <= 0) return;
  in.seekg(-1, std::ios::end);
  char last = '\n';
  in.get(last);
  in.close();
  if (last != '\n') std::ofstream(path, std::ios::app | std::ios::binary) << '\n';
}

}  // namespace

Logger::Logger(int rank, const std::string& log_dir, bool live_progress, LogFiles files,
               bool metrics_file)
    : rank_(rank), live_(live_progress && rank == 0) {
  if (rank_ != 0) return;
  log_path_ = log_dir + "/mnist_train.log";
  metrics_path_ = log_dir + "/metrics.jsonl";
  auto console_sink = std::make_shared<spdlog::sinks::stdout_sink_st>();
  console_sink->set_pattern("%v");
  if (files == LogFiles::None) {
    console_ = std::make_shared<spdlog::logger>("mnist_ddp", console_sink);
    console_->flush_on(spdlog::level::info);
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) {
    throw UserError(
        fmt::format("--log-dir {}: cannot create the directory: {}; pass a writable "
                    "--log-dir",
                    log_dir, ec.message()));
  }
  const bool append = files == LogFiles::Append;
  if (append) {
    if (metrics_file) end_last_line(metrics_path_);
    end_last_line(log_path_);
  }
  if (metrics_file) {
    metrics_.open(metrics_path_, std::ios::out | (append ? std::ios::app : std::ios::trunc));
    if (!metrics_) {
      throw UserError(fmt::format("--log-dir {}: cannot write {}: {}; pass a writable --log-dir",
                                  log_dir, metrics_path_, std::strerror(errno)));
    }
  }
  try {
    auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_st>(log_path_, !append);
    // ISO 8601 in UTC with the zone written, as metrics.jsonl's times: lines from nodes in other
    // zones (or a cluster's UTC against a laptop's local time) compare as they are.
    file_sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        "[%Y-%m-%dT%H:%M:%S.%eZ] %v", spdlog::pattern_time_type::utc));
    console_ = std::make_shared<spdlog::logger>("mnist_ddp",
                                                spdlog::sinks_init_list{console_sink, file_sink});
    file_ = std::make_shared<spdlog::logger>("mnist_ddp_file", file_sink);
    console_->flush_on(spdlog::level::info);
    file_->flush_on(spdlog::level::info);
  } catch (const spdlog::spdlog_ex& e) {
    throw UserError(fmt::format("--log-dir {}: cannot open {}: {}", log_dir, log_path_, e.what()));
  }
}

Logger::~Logger() {
  if (rank_ == 0) clear_progress();
}

void Logger::clear_progress() {
  if (progress_shown_) {
    std::fputs("\r\033[K", stdout);
    std::fflush(stdout);
    progress_shown_ = false;
  }
}

void Logger::info(const std::string& line) {
  if (rank_ != 0) return;
  clear_progress();
  console_->info(line);
}

void Logger::file(const std::string& line) {
  if (rank_ != 0 || !file_) return;
  file_->info(line);
}

void Logger::warn(const std::string& line) {
  if (rank_ != 0) return;
  clear_progress();
  std::fflush(stdout);  // the lines before it first, where both streams share a terminal or file
  std::fprintf(stderr, "mnist_ddp: warning: %s\n", line.c_str());
  std::fflush(stderr);
  if (file_) file_->info("warning: " + line);
}

void Logger::metrics(const nlohmann::json& record) {
  if (rank_ != 0 || !metrics_.is_open()) return;
  nlohmann::json versioned = record;
  versioned["schema"] = kMetricsSchema;
  // Paths need not be UTF-8 on Linux: invalid bytes become U+FFFD instead of an exception.
  metrics_ << versioned.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  metrics_.flush();
}

void Logger::progress(const std::string& line) {
  if (!live_) return;
  std::fputs(("\r\033[K" + line).c_str(), stdout);
  std::fflush(stdout);
  progress_shown_ = true;
}

}  // namespace mnist_ddp
