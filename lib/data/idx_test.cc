#include "lib/data/idx.h"

#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <set>

namespace hetps {
namespace {

std::string Dir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string Be32(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string Write(const std::string& name, const std::string& bytes, bool gz = false) {
  std::string path = Dir() + "/" + name;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  return path;
}

// n images of 2x3 with pixel value i*6+k, labels i % 10.
std::string Images(uint32_t n) {
  std::string s = Be32(0x803) + Be32(n) + Be32(2) + Be32(3);
  for (uint32_t i = 0; i < n * 6; ++i) s.push_back(static_cast<char>(i % 256));
  return s;
}

std::string Labels(uint32_t n) {
  std::string s = Be32(0x801) + Be32(n);
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 10));
  return s;
}

TEST_CASE("valid raw and gzip IDX files load with scaled pixels") {
  for (bool gz : {false, true}) {
    auto ds = LoadIdxDataset(Write("i", Images(4), gz), Write("l", Labels(4), gz));
    REQUIRE(ds.ok());
    CHECK(ds->size() == 4);
    CHECK(ds->rows == 2);
    CHECK(ds->cols == 3);
    CHECK(ds->pixels.size() == 24);
    CHECK(ds->pixels[7] == Approx(7 / 255.0f));
    CHECK(ds->labels[3] == 3);
  }
}

TEST_CASE("corrupt IDX files are clear errors") {
  std::string good_labels = Write("gl", Labels(4));
  struct Case {
    std::string images;
    std::string labels;
    std::string want;
  };
  std::string truncated = Images(4);
  truncated.pop_back();
  std::string bad_label = Labels(4);
  bad_label[9] = 10;
  std::vector<Case> cases = {
      {Images(4).substr(0, 10), Labels(4), "truncated header"},
      {truncated, Labels(4), "(truncated)"},
      {Images(4) + "x", Labels(4), "(trailing data)"},
      {Be32(0x801) + Images(4).substr(4), Labels(4), "bad magic"},
      {Be32(0x803) + Be32(0) + Be32(2) + Be32(3), Labels(0), "implausible shape"},
      {Be32(0x803) + Be32(1) + Be32(5000) + Be32(3), Labels(1), "implausible shape"},
      {Images(4), Labels(3), "has 3 labels but"},
      {Images(4), bad_label, "label 10 of sample 1"},
      {Images(4), Labels(4).substr(0, 10), "bytes, want 12"},
  };
  for (const auto& c : cases) {
    INFO(c.want);
    auto ds = LoadIdxDataset(Write("ci", c.images), Write("cl", c.labels));
    REQUIRE_FALSE(ds.ok());
    CHECK(std::string(ds.status().message()).find(c.want) != std::string::npos);
  }
  auto missing = LoadIdxDataset("/nonexistent/images", good_labels);
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("shards are disjoint, cover everything, and depend only on the seed") {
  const size_t n = 1003;
  std::set<uint32_t> seen;
  size_t total = 0;
  for (uint32_t w = 0; w < 4; ++w) {
    auto shard = ShardIndices(n, w, 4, 42);
    CHECK((shard.size() == 250 || shard.size() == 251));
    CHECK(shard == ShardIndices(n, w, 4, 42));
    total += shard.size();
    seen.insert(shard.begin(), shard.end());
  }
  CHECK(total == n);
  CHECK(seen.size() == n);
  CHECK(ShardIndices(n, 0, 4, 42) != ShardIndices(n, 0, 4, 43));
  CHECK(ShardIndices(n, 4, 4, 42).empty());
}

TEST_CASE("Debian's Fashion-MNIST loads: 60000 train, 10000 test, balanced labels") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  auto train = LoadFashionMnist(dir, true);
  INFO(train.status().message() << " (tools/bootstrap.sh installs dataset-fashion-mnist)");
  REQUIRE(train.ok());
  CHECK(train->size() == 60000);
  CHECK(train->rows == 28);
  CHECK(train->cols == 28);
  std::vector<int> per_class(10);
  for (uint8_t l : train->labels) ++per_class[l];
  for (int c : per_class) CHECK(c == 6000);
  float max_pixel = 0;
  for (float p : train->pixels) max_pixel = std::max(max_pixel, p);
  CHECK(max_pixel == 1.0f);
  auto test = LoadFashionMnist(dir, false);
  REQUIRE(test.ok());
  CHECK(test->size() == 10000);
}

}  // namespace
}  // namespace hetps
