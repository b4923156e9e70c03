// ConfigSchema binds configuration keys to fields of a caller-owned struct,
// so one declaration drives the YAML file, command-line flags, --help and
// --print-config. Precedence: flag > file > default (the field's initial
// value). Every error names the key and the file or flag it came from.
//
// Ownership: the schema stores raw pointers to the caller's fields; the struct
// must outlive the schema. Not thread-safe: configure once in main, then
// hand the struct to the daemon.
#ifndef HETPS_LIB_CONFIG_CONFIG_H_
#define HETPS_LIB_CONFIG_CONFIG_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps {

enum class ConfigSource { kDefault, kFile, kFlag };
const char* ConfigSourceName(ConfigSource source);

class ConfigSchema {
 public:
  struct Entry {
    std::string key;
    std::string value;  // effective value as text
    std::string type;   // "string" | "int" | "bool" | "double" | "address"
    std::string help;
    ConfigSource source = ConfigSource::kDefault;
  };

  explicit ConfigSchema(std::string program) : program_(std::move(program)) {}
  ConfigSchema(const ConfigSchema&) = delete;
  ConfigSchema& operator=(const ConfigSchema&) = delete;

  void String(std::string key, std::string* field, std::string help);
  // host:port (port 0 = any free port); empty allowed when `optional`.
  void Address(std::string key, std::string* field, std::string help, bool optional = false);
  void Int(std::string key, int64_t* field, std::string help,
           int64_t min = std::numeric_limits<int64_t>::min(),
           int64_t max = std::numeric_limits<int64_t>::max());
  void Double(std::string key, double* field, std::string help, double min, double max);
  void Bool(std::string key, bool* field, std::string help);
  // A string restricted to `choices`.
  void Enum(std::string key, std::string* field, std::string help,
            std::vector<std::string> choices);

  // Applies a YAML mapping of key: scalar. Unknown keys, non-scalar values and
  // values of the wrong type are errors; nothing is applied on error.
  absl::Status LoadYamlFile(const std::string& path);
  absl::Status LoadYamlString(absl::string_view text, absl::string_view origin);
  // Sets one key from text (a flag). `origin` names it in errors.
  absl::Status Set(absl::string_view key, absl::string_view value, ConfigSource source,
                   absl::string_view origin);

  bool HasKey(absl::string_view key) const;
  bool IsBool(absl::string_view key) const;
  std::vector<Entry> Entries() const;
  // The effective configuration as YAML, each line commented with its source;
  // feeding it back as a file reproduces the configuration.
  std::string DumpYaml() const;
  std::string Help() const;
  const std::string& program() const { return program_; }

 private:
  enum class Type { kString, kAddress, kInt, kDouble, kBool, kEnum };
  struct Field {
    std::string key;
    Type type;
    void* ptr;
    std::string help;
    int64_t int_min = 0, int_max = 0;
    double double_min = 0, double_max = 0;
    bool optional = false;
    std::vector<std::string> choices;
    ConfigSource source = ConfigSource::kDefault;
  };

  Field* Find(absl::string_view key);
  const Field* Find(absl::string_view key) const;
  // Parses `value` for `f` without storing it.
  absl::Status Check(const Field& f, absl::string_view value) const;
  void Store(Field& f, absl::string_view value);
  static std::string ValueText(const Field& f);
  static const char* TypeName(Type t);
  // What a value of this field must be, for errors ("an integer").
  static std::string Expected(const Field& f);

  std::string program_;
  std::vector<Field> fields_;
};

// What the command line asked for besides config keys.
struct CommandLine {
  std::string config_path;
  bool print_config = false;
  bool help = false;
};

// Parses argv: --config=FILE (or --config FILE), --print-config, --help, and
// --<key>=<value> (or --<key> <value>; a bare --<bool-key> means true) for
// every schema key. Loads the file (if any) then applies the flags. Dashes in
// flag names are accepted for underscores.
absl::StatusOr<CommandLine> LoadConfiguration(int argc, char** argv, ConfigSchema* schema);

}  // namespace hetps

#endif  // HETPS_LIB_CONFIG_CONFIG_H_
