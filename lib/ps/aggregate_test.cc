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

TEST_CASE("missing ranges are the complement of what arrived", "[aggregate]") {
  CHECK(MissingRanges({}, 10) == std::vector<Range>{{0, 10}});
  CHECK(MissingRanges({{0, 10}}, 10).empty());
  CHECK(MissingRanges({{7, 10}, {0, 3}}, 10) == std::vector<Range>{{3, 7}});
  CHECK(MissingRanges({{3, 5}, {5, 6}}, 8) == std::vector<Range>{{0, 3}, {6, 8}});
}

// LTP bubbles: whole packets of each input are lost at random and
// zero-filled; the mean over the inputs that delivered each element must
// equal, bit for bit, that mean computed directly.
TEST_CASE("unbiased mean is exact for a known delivery pattern", "[aggregate][ltp]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  for (size_t n : {1u, 2u, 5u, 8u, 9u, 13u}) {
    for (double loss : {0.0, 0.01, 0.3, 0.9}) {
      const size_t len = 10007, packet = 349;  // the last packet is short
      std::vector<std::vector<float>> bufs(n, std::vector<float>(len));
      std::vector<std::vector<uint8_t>> got(n, std::vector<uint8_t>(len, 1));
      std::vector<std::vector<Range>> missing(n);
      std::vector<const float*> ptrs;
      std::bernoulli_distribution lost(loss);
      for (size_t k = 0; k < n; ++k) {
        std::vector<Range> have;
        for (size_t at = 0; at < len; at += packet) {
          const size_t end = std::min(len, at + packet);
          if (lost(rng)) {
            for (size_t i = at; i < end; ++i) got[k][i] = 0;
          } else {
            have.push_back({at, end});
          }
        }
        missing[k] = MissingRanges(have, len);
        for (size_t i = 0; i < len; ++i) bufs[k][i] = got[k][i] ? d(rng) : 0.0f;  // bubbles
        ptrs.push_back(bufs[k].data());
      }
      std::vector<float> out(len, -1.0f), want(len);
      uint64_t want_partial = 0;
      for (size_t i = 0; i < len; ++i) {
        float s = 0;
        size_t c = 0;
        for (size_t k = 0; k < n; ++k) {
          if (got[k][i]) {
            s = c == 0 ? bufs[k][i] : s + bufs[k][i];
            ++c;
          }
        }
        want[i] = c == 0 ? 0.0f : s * (1.0f / c);
        if (c < n) ++want_partial;
      }
      const uint64_t partial = MeanUnbiased(ptrs.data(), missing.data(), n, len, out.data());
      INFO("n " << n << " loss " << loss);
      CHECK(out == want);
      CHECK(partial == want_partial);
      if (loss == 0) CHECK(partial == 0);
    }
  }
}

TEST_CASE("unbiased mean keeps the scale where the zero-filled mean shrinks it",
          "[aggregate][ltp]") {
  // 4 workers all send 1.0; worker 0 lost the first half. The paper's
  // zero-filled mean gives 0.75 there; the unbiased mean gives 1.0.
  const size_t n = 4, len = 100;
  std::vector<std::vector<float>> bufs(n, std::vector<float>(len, 1.0f));
  std::fill(bufs[0].begin(), bufs[0].begin() + 50, 0.0f);
  std::vector<std::vector<Range>> missing(n);
  missing[0] = {{0, 50}};
  std::vector<const float*> ptrs;
  for (auto& b : bufs) ptrs.push_back(b.data());
  std::vector<float> out(len), zero_filled(len);
  CHECK(MeanUnbiased(ptrs.data(), missing.data(), n, len, out.data()) == 50);
  SumScaled(ptrs.data(), n, len, 1.0f / n, zero_filled.data());
  CHECK(zero_filled[0] == 0.75f);
  for (float x : out) CHECK(x == 1.0f);
}

TEST_CASE("a weighted mean counts each input by its samples, also over bubbles",
          "[aggregate][wlbs]") {
  // Worker 0 averaged 96 samples, worker 1 32; worker 1 lost [10, 20) and
  // worker 0 lost [15, 25): there only the other one counts.
  const size_t n = 2, len = 40;
  std::vector<std::vector<float>> bufs = {std::vector<float>(len, 1.0f),
                                          std::vector<float>(len, 5.0f)};
  std::fill(bufs[1].begin() + 10, bufs[1].begin() + 20, 0.0f);
  std::fill(bufs[0].begin() + 15, bufs[0].begin() + 25, 0.0f);
  std::vector<std::vector<Range>> missing = {{{15, 25}}, {{10, 20}}};
  std::vector<const float*> ptrs = {bufs[0].data(), bufs[1].data()};
  const float w[] = {96.0f, 32.0f};
  std::vector<float> out(len, -1.0f);
  CHECK(MeanUnbiased(ptrs.data(), missing.data(), n, len, out.data(), w) == 15);
  for (size_t i = 0; i < len; ++i) {
    INFO("element " << i);
    if (i >= 10 && i < 15) {
      CHECK(out[i] == 1.0f);  // worker 0 alone
    } else if (i >= 15 && i < 20) {
      CHECK(out[i] == 0.0f);  // nobody
    } else if (i >= 20 && i < 25) {
      CHECK(out[i] == 5.0f);  // worker 1 alone
    } else {
      CHECK(out[i] == Approx((96.0 * 1 + 32.0 * 5) / 128));  // 2.0
    }
  }
}

TEST_CASE("equal weights give the unweighted mean bit for bit", "[aggregate][wlbs]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> d;
  const size_t n = 3, len = 5000;
  std::vector<std::vector<float>> bufs(n, std::vector<float>(len));
  std::vector<const float*> ptrs;
  for (auto& b : bufs) {
    for (float& x : b) x = d(rng);
    ptrs.push_back(b.data());
  }
  std::fill(bufs[2].begin() + 100, bufs[2].begin() + 700, 0.0f);
  std::vector<std::vector<Range>> missing = {{}, {}, {{100, 700}}};
  const float w[] = {64.0f, 64.0f, 64.0f};
  std::vector<float> plain(len), weighted(len);
  MeanUnbiased(ptrs.data(), missing.data(), n, len, plain.data());
  MeanUnbiased(ptrs.data(), missing.data(), n, len, weighted.data(), w);
  CHECK(plain == weighted);
  CHECK(!Unequal(w, n));
}

}  // namespace
}  // namespace ps
}  // namespace hetps
