#include "lib/base/json_writer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/escape.h"

namespace hetps {

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_element_.empty()) {
    if (has_element_.back()) out_.push_back(',');
    has_element_.back() = true;
  }
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_.push_back('{');
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  out_.push_back('}');
  has_element_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_.push_back('[');
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  out_.push_back(']');
  has_element_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::Key(absl::string_view key) {
  BeforeValue();
  out_.append(Escape(key));
  out_.push_back(':');
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(absl::string_view v) {
  BeforeValue();
  out_.append(Escape(v));
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t v) {
  BeforeValue();
  absl::StrAppend(&out_, v);
  return *this;
}

JsonWriter& JsonWriter::Uint(uint64_t v) {
  BeforeValue();
  absl::StrAppend(&out_, v);
  return *this;
}

JsonWriter& JsonWriter::Double(double v) {
  BeforeValue();
  if (!std::isfinite(v)) {
    out_.append("null");  // JSON has no NaN/Inf.
  } else {
    absl::StrAppendFormat(&out_, "%.17g", v);
  }
  return *this;
}

JsonWriter& JsonWriter::Bool(bool v) {
  BeforeValue();
  out_.append(v ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::Null() {
  BeforeValue();
  out_.append("null");
  return *this;
}

// Strings may come from outside: controls and invisible format characters
// (bidi overrides, zero-width) are written as \uXXXX (the same string to a
// JSON reader, nothing hidden on a terminal), and bytes that are not UTF-8
// as U+FFFD (JSON text must be UTF-8).
std::string JsonWriter::Escape(absl::string_view v) {
  std::string out = "\"";
  for (size_t i = 0; i < v.size();) {
    uint32_t cp = 0;
    const size_t n = DecodeUtf8(v, i, &cp);
    if (n == 0) {
      out.append("\\ufffd");
      ++i;
      continue;
    }
    switch (cp) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        if (IsControlOrInvisible(cp)) {
          absl::StrAppendFormat(&out, "\\u%04x", cp);
        } else {
          out.append(v.data() + i, n);
        }
    }
    i += n;
  }
  out.push_back('"');
  return out;
}

}  // namespace hetps
