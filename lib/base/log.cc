#include "lib/base/log.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/base/escape.h"

namespace hetps {

bool ParseLogLevel(absl::string_view text, LogLevel* level) {
  if (text == "debug") {
    *level = LogLevel::kDebug;
  } else if (text == "info") {
    *level = LogLevel::kInfo;
  } else if (text == "warn") {
    *level = LogLevel::kWarn;
  } else if (text == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

void LogSink::WriteLine(const std::string& line) {
  absl::MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

Logger::Field::Field(absl::string_view k, double v) : key(k), value(absl::StrFormat("%.6g", v)) {}

namespace {

bool NeedsQuoting(absl::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || c == '\n' || c == '\t') return true;
  }
  return false;
}

// Values may come from outside (job names, errors from peers): control and
// bidi characters are escaped (escape.h), so a line stays one line and
// shows what it holds.
void AppendValue(std::string* out, absl::string_view v) {
  const std::string safe = EscapeUntrusted(v);
  if (!NeedsQuoting(v) && safe == v) {
    out->append(v.data(), v.size());
    return;
  }
  out->push_back('"');
  for (char c : safe) {
    if (c == '"') {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace

std::string Logger::Format(absl::string_view timestamp, LogLevel level, absl::string_view node,
                           absl::string_view component, absl::string_view event,
                           std::initializer_list<Field> fields) {
  std::string line = absl::StrCat("ts=", timestamp, " level=", LogLevelName(level), " node=");
  AppendValue(&line, node.empty() ? "-" : node);
  line.append(" component=");
  AppendValue(&line, component.empty() ? "-" : component);
  line.append(" event=");
  AppendValue(&line, event);
  for (const Field& f : fields) {
    line.push_back(' ');
    line.append(f.key);
    line.push_back('=');
    AppendValue(&line, f.value);
  }
  return line;
}

void Logger::Log(LogLevel level, absl::string_view event,
                 std::initializer_list<Field> fields) const {
  if (sink_ == nullptr || !sink_->Enabled(level)) return;
  std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  sink_->WriteLine(Format(ts, level, node_id_, component_, event, fields));
}

}  // namespace hetps
