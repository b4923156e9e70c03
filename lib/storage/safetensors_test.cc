// Safetensors: a file reads back to what was written, byte-exact in the
// layout the format fixes; every malformed header is refused by name
// before anything is allocated from it.
#include "lib/storage/safetensors.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/test_dir.h"

namespace hetps {
namespace storage {
namespace {

// Files of this test, in one fresh directory.
std::string TempPath(const std::string& name) {
  static const std::string dir = MakeTestDir("safetensors");
  return dir + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A file with this header and `data_bytes` zero bytes of data.
std::string Raw(const std::string& name, const std::string& header, size_t data_bytes) {
  const std::string path = TempPath(name);
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char(uint64_t(header.size()) >> (8 * i));
  bytes += header;
  bytes.append(data_bytes, '\0');
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

SafetensorsFile Sample() {
  SafetensorsFile f;
  f.metadata = {{"model", "mlp"}, {"format", "x"}};
  f.tensors.push_back({"dense1.weight", {2, 3}, {1, 2, 3, 4, 5, 6}});
  f.tensors.push_back({"dense1.bias", {2}, {-1.5f, 0.25f}});
  f.tensors.push_back({"empty", {0, 4}, {}});
  return f;
}

TEST_CASE("a safetensors file reads back to what was written", "[storage]") {
  const std::string path = TempPath("a.safetensors");
  REQUIRE(WriteSafetensors(path, Sample()).ok());
  auto back = ReadSafetensors(path);
  REQUIRE(back.ok());
  CHECK(back->metadata == Sample().metadata);
  REQUIRE(back->tensors.size() == 3);
  CHECK(back->tensors[0].name == "dense1.weight");
  CHECK(back->tensors[0].shape == std::vector<int64_t>{2, 3});
  CHECK(back->tensors[0].data == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(back->tensors[1].data == std::vector<float>{-1.5f, 0.25f});
  CHECK(back->tensors[2].data.empty());
  // The layout itself: header length, a space-padded JSON header whose
  // length is a multiple of 8, then the floats little-endian.
  const std::string bytes = ReadAll(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 8 * 4);
  const std::string header = bytes.substr(8, n);
  CHECK(header.find("\"dense1.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                    "\"data_offsets\":[0,24]}") != std::string::npos);
  float first;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  CHECK(first == 1.0f);
}

TEST_CASE("malformed safetensors files are refused, each by name", "[storage]") {
  auto refused = [](const std::string& path, const std::string& why) {
    auto r = ReadSafetensors(path);
    INFO(path << ": " << r.status().message());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(r.status().message()).find(why) != std::string::npos);
  };
  const std::string ok_tensor = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  {
    // A header length far beyond the file.
    const std::string path = TempPath("huge.st");
    std::string b(8, '\xff');
    std::ofstream(path, std::ios::binary) << b;
    refused(path, "header length");
  }
  refused(Raw("notjson.st", "not json", 8), "not a JSON object");
  refused(Raw("dtype.st", R"({"t":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4),
          "only F32");
  refused(Raw("outside.st", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
          "outside the data");
  refused(Raw("size.st", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
          "bytes for its shape");
  refused(
      Raw("shape.st", R"({"t":{"dtype":"F32","shape":[1e300, 1e300],"data_offsets":[0,8]}})", 8),
      "bad shape");
  refused(
      Raw("overlap.st",
          absl::StrCat("{", ok_tensor, R"(,"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
          8),
      "overlap");
  refused(Raw("meta.st", R"({"__metadata__":{"k":1}})", 0), "not a string");
  refused(Raw("fields.st", R"({"t":{"dtype":"F32"}})", 0), "needs dtype");
  CHECK(ReadSafetensors(TempPath("missing.st")).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("writing refuses data that does not match its shape, and repeated names", "[storage]") {
  SafetensorsFile f = Sample();
  f.tensors[0].data.pop_back();
  CHECK(WriteSafetensors(TempPath("b.st"), f).code() == absl::StatusCode::kInvalidArgument);
  f = Sample();
  f.tensors[1].name = "dense1.weight";
  CHECK(WriteSafetensors(TempPath("c.st"), f).code() == absl::StatusCode::kInvalidArgument);
  CHECK(WriteSafetensors("/nonexistent-dir/x.st", Sample()).code() ==
        absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace storage
}  // namespace hetps
