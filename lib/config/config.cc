#include "lib/config/config.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "lib/base/net_address.h"
#include "lib/base/status_macros.h"

namespace hetps {

const char* ConfigSourceName(ConfigSource source) {
  switch (source) {
    case ConfigSource::kDefault:
      return "default";
    case ConfigSource::kFile:
      return "file";
    case ConfigSource::kFlag:
      return "flag";
  }
  return "default";
}

void ConfigSchema::String(std::string key, std::string* field, std::string help) {
  fields_.push_back({std::move(key), Type::kString, field, std::move(help)});
}

void ConfigSchema::Address(std::string key, std::string* field, std::string help, bool optional) {
  Field f{std::move(key), Type::kAddress, field, std::move(help)};
  f.optional = optional;
  fields_.push_back(std::move(f));
}

void ConfigSchema::Int(std::string key, int64_t* field, std::string help, int64_t min,
                       int64_t max) {
  Field f{std::move(key), Type::kInt, field, std::move(help)};
  f.int_min = min;
  f.int_max = max;
  fields_.push_back(std::move(f));
}

void ConfigSchema::Double(std::string key, double* field, std::string help, double min,
                          double max) {
  Field f{std::move(key), Type::kDouble, field, std::move(help)};
  f.double_min = min;
  f.double_max = max;
  fields_.push_back(std::move(f));
}

void ConfigSchema::Bool(std::string key, bool* field, std::string help) {
  fields_.push_back({std::move(key), Type::kBool, field, std::move(help)});
}

void ConfigSchema::Enum(std::string key, std::string* field, std::string help,
                        std::vector<std::string> choices) {
  Field f{std::move(key), Type::kEnum, field, std::move(help)};
  f.choices = std::move(choices);
  fields_.push_back(std::move(f));
}

ConfigSchema::Field* ConfigSchema::Find(absl::string_view key) {
  for (Field& f : fields_) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

const ConfigSchema::Field* ConfigSchema::Find(absl::string_view key) const {
  for (const Field& f : fields_) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

bool ConfigSchema::HasKey(absl::string_view key) const { return Find(key) != nullptr; }

bool ConfigSchema::IsBool(absl::string_view key) const {
  const Field* f = Find(key);
  return f != nullptr && f->type == Type::kBool;
}

std::string ConfigSchema::Expected(const Field& f) {
  switch (f.type) {
    case Type::kString:
      return "a string";
    case Type::kAddress:
      return "a host:port address";
    case Type::kInt:
      return "an integer";
    case Type::kDouble:
      return "a number";
    case Type::kBool:
      return "true or false";
    case Type::kEnum:
      return absl::StrCat("one of ", absl::StrJoin(f.choices, ", "));
  }
  return "a value";
}

const char* ConfigSchema::TypeName(Type t) {
  switch (t) {
    case Type::kString:
      return "string";
    case Type::kAddress:
      return "address";
    case Type::kInt:
      return "int";
    case Type::kDouble:
      return "double";
    case Type::kBool:
      return "bool";
    case Type::kEnum:
      return "enum";
  }
  return "string";
}

namespace {

bool ParseBool(absl::string_view v, bool* out) {
  std::string s = absl::AsciiStrToLower(v);
  if (s == "true" || s == "yes" || s == "on" || s == "1") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off" || s == "0") {
    *out = false;
  } else {
    return false;
  }
  return true;
}

}  // namespace

absl::Status ConfigSchema::Check(const Field& f, absl::string_view value) const {
  switch (f.type) {
    case Type::kString:
      return absl::OkStatus();
    case Type::kAddress: {
      if (value.empty() && f.optional) return absl::OkStatus();
      absl::StatusOr<HostPort> hp = ParseHostPort(value);
      if (!hp.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected host:port, ", hp.status().message()));
      }
      return absl::OkStatus();
    }
    case Type::kInt: {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", value, "'"));
      }
      if (v < f.int_min || v > f.int_max) {
        return absl::InvalidArgumentError(
            absl::StrCat("value ", v, " is out of range [", f.int_min, ", ", f.int_max, "]"));
      }
      return absl::OkStatus();
    }
    case Type::kDouble: {
      double v = 0;
      if (!absl::SimpleAtod(value, &v)) {
        return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", value, "'"));
      }
      if (!(v >= f.double_min && v <= f.double_max)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("value %g is out of range [%g, %g]", v, f.double_min, f.double_max));
      }
      return absl::OkStatus();
    }
    case Type::kBool: {
      bool b = false;
      if (!ParseBool(value, &b)) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected true or false, got '", value, "'"));
      }
      return absl::OkStatus();
    }
    case Type::kEnum: {
      for (const std::string& c : f.choices) {
        if (c == value) return absl::OkStatus();
      }
      return absl::InvalidArgumentError(
          absl::StrCat("expected one of ", absl::StrJoin(f.choices, "|"), ", got '", value, "'"));
    }
  }
  return absl::OkStatus();
}

void ConfigSchema::Store(Field& f, absl::string_view value) {
  switch (f.type) {
    case Type::kString:
    case Type::kAddress:
    case Type::kEnum:
      *static_cast<std::string*>(f.ptr) = std::string(value);
      break;
    case Type::kInt:
      (void)absl::SimpleAtoi(value, static_cast<int64_t*>(f.ptr));
      break;
    case Type::kDouble:
      (void)absl::SimpleAtod(value, static_cast<double*>(f.ptr));
      break;
    case Type::kBool:
      (void)ParseBool(value, static_cast<bool*>(f.ptr));
      break;
  }
}

std::string ConfigSchema::ValueText(const Field& f) {
  switch (f.type) {
    case Type::kString:
    case Type::kAddress:
    case Type::kEnum:
      return *static_cast<const std::string*>(f.ptr);
    case Type::kInt:
      return absl::StrCat(*static_cast<const int64_t*>(f.ptr));
    case Type::kDouble: {
      // Shortest text that reads back to the same double (job specs travel
      // as text and must reproduce training exactly).
      const double d = *static_cast<const double*>(f.ptr);
      std::string t = absl::StrFormat("%.15g", d);
      if (std::strtod(t.c_str(), nullptr) != d) t = absl::StrFormat("%.17g", d);
      return t;
    }
    case Type::kBool:
      return *static_cast<const bool*>(f.ptr) ? "true" : "false";
  }
  return "";
}

absl::Status ConfigSchema::Set(absl::string_view key, absl::string_view value, ConfigSource source,
                               absl::string_view origin) {
  Field* f = Find(key);
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "' in ", origin));
  }
  absl::Status s = Check(*f, value);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", key, "' in ", origin, ": ", s.message()));
  }
  Store(*f, value);
  f->source = source;
  return absl::OkStatus();
}

absl::Status ConfigSchema::LoadYamlString(absl::string_view text, absl::string_view origin) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": YAML syntax error at line ", e.mark.line + 1, ": ", e.msg));
  }
  if (root.IsNull()) return absl::OkStatus();  // empty file: all defaults
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": expected a mapping of key: value at the top level"));
  }
  // Validate everything first so a bad file changes nothing.
  std::vector<std::pair<Field*, std::string>> pending;
  absl::flat_hash_map<std::string, int> seen;  // key -> line
  for (const auto& kv : root) {
    std::string key;
    try {
      key = kv.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, " line ", kv.first.Mark().line + 1, ": keys must be plain strings"));
    }
    std::string where = absl::StrCat(origin, " line ", kv.first.Mark().line + 1);
    // YAML parsers keep the last of a repeated key: a typo'd copy-paste
    // would silently win.
    if (auto [it, fresh] = seen.emplace(key, kv.first.Mark().line + 1); !fresh) {
      return absl::InvalidArgumentError(absl::StrCat("key '", key, "' is given twice in ", origin,
                                                     " (lines ", it->second, " and ",
                                                     kv.first.Mark().line + 1, ")"));
    }
    Field* f = Find(key);
    if (f == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "' in ", where));
    }
    if (!kv.second.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key '", key, "' in ", where, ": expected ", Expected(*f),
                       kv.second.IsNull() ? ", got nothing" : ", got a list or mapping"));
    }
    std::string value = kv.second.Scalar();
    absl::Status s = Check(*f, value);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("key '", key, "' in ", where, ": ", s.message()));
    }
    pending.emplace_back(f, std::move(value));
  }
  for (auto& [f, value] : pending) {
    Store(*f, value);
    f->source = ConfigSource::kFile;
  }
  return absl::OkStatus();
}

absl::Status ConfigSchema::LoadYamlFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read config file '", path, "': not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrCat("cannot read config file '", path, "': ", std::strerror(errno)));
  }
  return LoadYamlString(text.str(), path);
}

std::vector<ConfigSchema::Entry> ConfigSchema::Entries() const {
  std::vector<Entry> out;
  out.reserve(fields_.size());
  for (const Field& f : fields_) {
    out.push_back({f.key, ValueText(f), TypeName(f.type), f.help, f.source});
  }
  return out;
}

std::string ConfigSchema::DumpYaml() const {
  std::string out = absl::StrCat("# effective configuration of ", program_, "\n");
  for (const Field& f : fields_) {
    std::string v = ValueText(f);
    // Quote strings so empty values and YAML-special text read back intact.
    bool quote = f.type == Type::kString || f.type == Type::kAddress || f.type == Type::kEnum;
    std::string shown =
        quote ? absl::StrCat("\"", absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"")
              : v;
    absl::StrAppend(&out, f.key, ": ", shown, "  # ", ConfigSourceName(f.source), "\n");
  }
  return out;
}

std::string ConfigSchema::Help() const {
  std::string out = absl::StrCat(
      "usage: ", program_, " [--config=FILE] [--print-config] [--KEY=VALUE ...]\n\n",
      "Every key can be set in the YAML file (KEY: VALUE) or as a flag; a flag wins.\n\n");
  for (const Field& f : fields_) {
    std::string type = TypeName(f.type);
    if (f.type == Type::kEnum) type = absl::StrJoin(f.choices, "|");
    absl::StrAppend(&out, "  --", f.key, " (", type, ", default \"", ValueText(f), "\")\n      ",
                    f.help, "\n");
  }
  return out;
}

absl::StatusOr<CommandLine> LoadConfiguration(int argc, char** argv, ConfigSchema* schema) {
  CommandLine cl;
  struct FlagValue {
    std::string key;
    std::string value;
  };
  std::vector<FlagValue> flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg.substr(0, 2) != "--" || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags look like --key=value)"));
    }
    arg.remove_prefix(2);
    std::string name;
    std::string value;
    bool has_value = false;
    size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
      has_value = true;
    } else {
      name = std::string(arg);
    }
    if (name == "help" || name == "h") {
      cl.help = true;
      continue;
    }
    if (name == "print-config" || name == "print_config") {
      cl.print_config = true;
      continue;
    }
    if (name == "config") {
      if (!has_value) {
        if (i + 1 >= argc) return absl::InvalidArgumentError("flag --config needs a file path");
        value = argv[++i];
      }
      cl.config_path = value;
      continue;
    }
    std::string key = absl::StrReplaceAll(name, {{"-", "_"}});
    if (!schema->HasKey(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (", schema->program(), " --help lists keys)"));
    }
    if (!has_value) {
      // A bare boolean flag means true; anything else takes the next argument.
      bool is_bool = schema->IsBool(key);
      if (is_bool && (i + 1 >= argc || absl::string_view(argv[i + 1]).substr(0, 2) == "--")) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    flags.push_back({key, value});
  }
  if (cl.help) return cl;
  if (!cl.config_path.empty()) RETURN_IF_ERROR(schema->LoadYamlFile(cl.config_path));
  for (const FlagValue& f : flags) {
    RETURN_IF_ERROR(
        schema->Set(f.key, f.value, ConfigSource::kFlag, absl::StrCat("flag --", f.key)));
  }
  return cl;
}

}  // namespace hetps
