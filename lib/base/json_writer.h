// JsonWriter: builds compact JSON text for stable, documented outputs (psctl
// -o json, ready files). Produces valid JSON as long as calls are balanced;
// Begin/End mismatches are programming errors. Not thread-safe.
#ifndef HETPS_LIB_BASE_JSON_WRITER_H_
#define HETPS_LIB_BASE_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace hetps {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // Inside an object: the next value's key.
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view v);
  JsonWriter& Int(int64_t v);
  JsonWriter& Uint(uint64_t v);
  JsonWriter& Double(double v);
  JsonWriter& Bool(bool v);
  JsonWriter& Null();

  const std::string& str() const { return out_; }

  static std::string Escape(absl::string_view v);

 private:
  void BeforeValue();

  std::string out_;
  // Per open container: whether it already holds an element.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace hetps

#endif  // HETPS_LIB_BASE_JSON_WRITER_H_
