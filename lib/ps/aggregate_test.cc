#include "lib/ps/aggregate.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

namespace hetps {
namespace ps {
namespace {

TEST_CASE("sum-scaled matches the straightforward loop bit for bit", "[aggregate]") {
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  for (size_t n : {1u, 2u, 3u, 8u, 9u, 17u}) {
    for (size_t len : {1u, 1023u, 1024u, 5000u}) {
      std::vector<std::vector<float>> bufs(n, std::vector<float>(len));
      std::vector<const float*> ptrs;
      for (auto& b : bufs) {
        for (auto& x : b) x = d(rng);
        ptrs.push_back(b.data());
      }
      const float scale = 1.0f / n;
      std::vector<float> out(len), want(len);
      SumScaled(ptrs.data(), n, len, scale, out.data());
      for (size_t i = 0; i < len; ++i) {
        float s = bufs[0][i];
        for (size_t k = 1; k < n; ++k) s += bufs[k][i];
        want[i] = s * scale;
      }
      CHECK(out == want);
    }
  }
}

TEST_CASE("one input with scale 1 is an exact copy", "[aggregate]") {
  std::vector<float> a = {1.5f, -2.25f, 3e-30f, 7.f};
  const float* p = a.data();
  std::vector<float> out(4);
  SumScaled(&p, 1, 4, 1.0f, out.data());
  CHECK(out == a);
  std::vector<float> b = {1.f, 2.f, 3.f, 4.f};
  std::vector<float> c = {1.f, 1.f, 1.f, 1.f};
  const float* two[] = {b.data(), c.data()};
  SumScaled(two, 2, 4, 0.5f, out.data());
  CHECK(out == std::vector<float>{1.f, 1.5f, 2.f, 2.5f});
}

}  // namespace
}  // namespace ps
}  // namespace hetps
