// Structured logging: one line per event, logfmt-style key=value pairs:
//   ts=2026-11-22T12:00:00.123Z level=info node=psd-0 component=agent
//   event=registered incarnation=3
// A Logger is a cheap value (node id + component + sink pointer); copy it and
// narrow the component with WithComponent(). The sink is owned by the caller
// (usually main) and must outlive every Logger that points at it.
// Thread-safe: concurrent events never interleave within a line.
#ifndef HETPS_LIB_BASE_LOG_H_
#define HETPS_LIB_BASE_LOG_H_

#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace hetps {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Parses "debug" | "info" | "warn" | "error".
bool ParseLogLevel(absl::string_view text, LogLevel* level);
const char* LogLevelName(LogLevel level);

// Where log lines go. Writes whole lines under a mutex.
class LogSink {
 public:
  explicit LogSink(std::FILE* out = stderr, LogLevel min_level = LogLevel::kInfo)
      : out_(out), min_level_(min_level) {}
  bool Enabled(LogLevel level) const { return level >= min_level_; }
  void WriteLine(const std::string& line);

 private:
  absl::Mutex mu_;
  std::FILE* out_;
  LogLevel min_level_;
};

class Logger {
 public:
  // One key=value field. Values are quoted when they contain spaces, quotes
  // or '='.
  struct Field {
    Field(absl::string_view k, absl::string_view v) : key(k), value(v) {}
    Field(absl::string_view k, const std::string& v) : key(k), value(v) {}
    Field(absl::string_view k, const char* v) : key(k), value(v) {}
    Field(absl::string_view k, bool v) : key(k), value(v ? "true" : "false") {}
    Field(absl::string_view k, int v) : key(k), value(std::to_string(v)) {}
    Field(absl::string_view k, long v) : key(k), value(std::to_string(v)) {}
    Field(absl::string_view k, long long v) : key(k), value(std::to_string(v)) {}
    Field(absl::string_view k, unsigned v) : key(k), value(std::to_string(v)) {}
    Field(absl::string_view k, unsigned long v) : key(k), value(std::to_string(v)) {}
    Field(absl::string_view k, unsigned long long v) : key(k), value(std::to_string(v)) {}
    Field(absl::string_view k, double v);
    std::string key;
    std::string value;
  };

  Logger() = default;  // discards everything
  Logger(LogSink* sink, std::string node_id, std::string component)
      : sink_(sink), node_id_(std::move(node_id)), component_(std::move(component)) {}

  Logger WithComponent(std::string component) const {
    return Logger(sink_, node_id_, std::move(component));
  }
  Logger WithNodeId(std::string node_id) const {
    return Logger(sink_, std::move(node_id), component_);
  }

  void Log(LogLevel level, absl::string_view event, std::initializer_list<Field> fields = {}) const;
  void Debug(absl::string_view event, std::initializer_list<Field> fields = {}) const {
    Log(LogLevel::kDebug, event, fields);
  }
  void Info(absl::string_view event, std::initializer_list<Field> fields = {}) const {
    Log(LogLevel::kInfo, event, fields);
  }
  void Warn(absl::string_view event, std::initializer_list<Field> fields = {}) const {
    Log(LogLevel::kWarn, event, fields);
  }
  void Error(absl::string_view event, std::initializer_list<Field> fields = {}) const {
    Log(LogLevel::kError, event, fields);
  }

  // Formats one line (no trailing newline); exposed for tests.
  static std::string Format(absl::string_view timestamp, LogLevel level, absl::string_view node,
                            absl::string_view component, absl::string_view event,
                            std::initializer_list<Field> fields);

 private:
  LogSink* sink_ = nullptr;
  std::string node_id_;
  std::string component_;
};

}  // namespace hetps

#endif  // HETPS_LIB_BASE_LOG_H_
