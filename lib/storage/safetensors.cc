#include "lib/storage/safetensors.h"

#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/base/json_writer.h"

namespace hetps {
namespace storage {
namespace {

static_assert(sizeof(float) == 4, "F32 is IEEE 754 binary32");

// Reads exactly n bytes at offset, or false.
bool ReadAt(int fd, uint64_t offset, void* out, size_t n) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = pread(fd, p, n, off_t(offset));
    if (r <= 0) return false;
    p += r;
    offset += uint64_t(r);
    n -= size_t(r);
  }
  return true;
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// A JSON number that is a whole number in [0, max].
bool AsCount(const google::protobuf::Value& v, uint64_t max, uint64_t* out) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue) return false;
  const double d = v.number_value();
  if (!(d >= 0) || d > double(max) || std::floor(d) != d) return false;
  *out = uint64_t(d);
  return true;
}

absl::Status Bad(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors ", path, ": ", why));
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const SafetensorsFile& f) {
  std::set<std::string> names;
  JsonWriter w;
  w.BeginObject();
  if (!f.metadata.empty()) {
    w.Key("__metadata__").BeginObject();
    for (const auto& [k, v] : f.metadata) w.Key(k).String(v);
    w.EndObject();
  }
  uint64_t offset = 0;
  for (const NamedTensor& t : f.tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: bad or repeated tensor name '", t.name, "'"));
    }
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError("safetensors: negative dimension");
      n *= uint64_t(d);
    }
    if (n != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", t.name, " has ",
                                                     t.data.size(), " values, its shape ", n));
    }
    w.Key(t.name).BeginObject();
    w.Key("dtype").String("F32");
    w.Key("shape").BeginArray();
    for (int64_t d : t.shape) w.Int(d);
    w.EndArray();
    w.Key("data_offsets").BeginArray().Uint(offset).Uint(offset + n * 4).EndArray();
    w.EndObject();
    offset += n * 4;
  }
  w.EndObject();
  std::string header = w.str();
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("safetensors: cannot create ", tmp, ": ", std::strerror(errno)));
  }
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  // Little-endian hosts only (x86-64, aarch64): the floats' bytes as they are.
  bool ok = WriteAll(fd, len, 8) && WriteAll(fd, header.data(), header.size());
  for (const NamedTensor& t : f.tensors) {
    ok = ok && WriteAll(fd, t.data.data(), t.data.size() * 4);
  }
  ok = ok && fsync(fd) == 0;
  const int err = errno;
  ok = close(fd) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("safetensors: cannot write ", path, ": ", std::strerror(ok ? errno : err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? absl::NotFoundError(absl::StrCat("safetensors: no file ", path))
                           : absl::UnavailableError(absl::StrCat("safetensors: cannot open ", path,
                                                                 ": ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return Bad(path, "not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  if (size > kSafetensorsBytesMax) return Bad(path, "larger than 64 GiB");
  uint8_t len[8];
  if (size < 8 || !ReadAt(fd, 0, len, 8)) return Bad(path, "shorter than its header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  if (n > kSafetensorsHeaderMax || n > size - 8) {
    return Bad(path, absl::StrCat("header length ", n, " (file ", size, " bytes)"));
  }
  std::string header(n, '\0');
  if (!ReadAt(fd, 8, header.data(), n)) return Bad(path, "header unreadable");
  google::protobuf::Struct root;
  google::protobuf::util::JsonParseOptions jo;
  if (!google::protobuf::util::JsonStringToMessage(header, &root, jo).ok()) {
    return Bad(path, "header is not a JSON object");
  }
  const uint64_t data_size = size - 8 - n;
  SafetensorsFile out;
  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  for (const auto& [name, value] : root.fields()) {
    if (name == "__metadata__") {
      if (value.kind_case() != google::protobuf::Value::kStructValue) {
        return Bad(path, "__metadata__ is not an object");
      }
      for (const auto& [k, v] : value.struct_value().fields()) {
        if (v.kind_case() != google::protobuf::Value::kStringValue) {
          return Bad(path, absl::StrCat("metadata ", k, " is not a string"));
        }
        out.metadata[k] = v.string_value();
      }
      continue;
    }
    if (value.kind_case() != google::protobuf::Value::kStructValue) {
      return Bad(path, absl::StrCat("tensor ", name, " is not an object"));
    }
    const auto& fields = value.struct_value().fields();
    auto dtype = fields.find("dtype");
    auto shape = fields.find("shape");
    auto offsets = fields.find("data_offsets");
    if (dtype == fields.end() || shape == fields.end() || offsets == fields.end() ||
        shape->second.kind_case() != google::protobuf::Value::kListValue ||
        offsets->second.kind_case() != google::protobuf::Value::kListValue ||
        offsets->second.list_value().values_size() != 2) {
      return Bad(path, absl::StrCat("tensor ", name, ": needs dtype, shape and data_offsets"));
    }
    if (dtype->second.string_value() != "F32") {
      return Bad(path, absl::StrCat("tensor ", name, " is ", dtype->second.string_value(),
                                    " (only F32 is read)"));
    }
    NamedTensor t;
    t.name = name;
    uint64_t count = 1;
    for (const auto& d : shape->second.list_value().values()) {
      uint64_t dim = 0;
      if (!AsCount(d, kSafetensorsBytesMax / 4, &dim))
        return Bad(path, absl::StrCat("tensor ", name, ": bad shape"));
      t.shape.push_back(int64_t(dim));
      // Saturating just past what the data can hold: no overflow, and a 0
      // anywhere still makes an empty tensor.
      count = dim == 0 ? 0 : (count > data_size / 4 / dim ? data_size / 4 + 1 : count * dim);
    }
    Span s{0, 0, out.tensors.size()};
    if (!AsCount(offsets->second.list_value().values(0), data_size, &s.begin) ||
        !AsCount(offsets->second.list_value().values(1), data_size, &s.end) || s.end < s.begin) {
      return Bad(path, absl::StrCat("tensor ", name, ": data_offsets outside the data"));
    }
    if (count > data_size / 4 || s.end - s.begin != count * 4) {
      return Bad(path,
                 absl::StrCat("tensor ", name, ": ", s.end - s.begin, " bytes for its shape"));
    }
    spans.push_back(s);
    out.tensors.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) return Bad(path, "tensors overlap");
  }
  std::vector<NamedTensor> ordered;
  for (const Span& s : spans) {
    NamedTensor& t = out.tensors[s.index];
    t.data.resize((s.end - s.begin) / 4);
    if (!ReadAt(fd, 8 + n + s.begin, t.data.data(), s.end - s.begin)) {
      return Bad(path, absl::StrCat("tensor ", t.name, " unreadable"));
    }
    ordered.push_back(std::move(t));
  }
  out.tensors = std::move(ordered);
  return out;
}

}  // namespace storage
}  // namespace hetps
