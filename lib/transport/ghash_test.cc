// Ghash against OpenSSL's AES-256-GCM with no plaintext (GMAC): for every
// head length up to kHeadMax and body lengths across the 32-block step,
// its hash masked with AES_K(J0) is OpenSSL's tag, byte for byte. Random
// keys, nonces and data from a fixed seed.
#include "lib/transport/ghash.h"

#include <openssl/evp.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

namespace hetps {
namespace transport {
namespace {

struct Reference {
  explicit Reference(const uint8_t key[32]) {
    gcm = EVP_CIPHER_CTX_new();
    ecb = EVP_CIPHER_CTX_new();
    REQUIRE(EVP_EncryptInit_ex(gcm, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1);
    REQUIRE(EVP_CIPHER_CTX_ctrl(gcm, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) == 1);
    REQUIRE(EVP_EncryptInit_ex(gcm, nullptr, nullptr, key, nullptr) == 1);
    REQUIRE(EVP_EncryptInit_ex(ecb, EVP_aes_256_ecb(), nullptr, key, nullptr) == 1);
    EVP_CIPHER_CTX_set_padding(ecb, 0);
  }
  ~Reference() {
    EVP_CIPHER_CTX_free(gcm);
    EVP_CIPHER_CTX_free(ecb);
  }
  std::vector<uint8_t> Block(const uint8_t in[16]) {
    std::vector<uint8_t> out(16);
    int n = 0;
    REQUIRE(EVP_EncryptUpdate(ecb, out.data(), &n, in, 16) == 1);
    return out;
  }
  std::vector<uint8_t> Tag(const uint8_t nonce[12], const std::vector<uint8_t>& head,
                           const std::vector<uint8_t>& body) {
    int n = 0;
    uint8_t unused[16];
    std::vector<uint8_t> tag(16);
    REQUIRE(EVP_EncryptInit_ex(gcm, nullptr, nullptr, nullptr, nonce) == 1);
    if (!head.empty()) REQUIRE(EVP_EncryptUpdate(gcm, nullptr, &n, head.data(), int(head.size())));
    if (!body.empty()) REQUIRE(EVP_EncryptUpdate(gcm, nullptr, &n, body.data(), int(body.size())));
    REQUIRE(EVP_EncryptFinal_ex(gcm, unused, &n) == 1);
    REQUIRE(EVP_CIPHER_CTX_ctrl(gcm, EVP_CTRL_GCM_GET_TAG, 16, tag.data()) == 1);
    return tag;
  }
  EVP_CIPHER_CTX* gcm;
  EVP_CIPHER_CTX* ecb;
};

std::vector<uint8_t> Random(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST_CASE("Ghash masked with AES_K(J0) is OpenSSL's GMAC tag", "[ghash]") {
  if (!Ghash::Available()) {
    // PacketAuth then never constructs one; its tests cover the fallbacks.
    WARN("this CPU has no AVX-512 VPCLMULQDQ: Ghash not tested here");
    return;
  }
  std::mt19937_64 rng(20261124);
  std::vector<size_t> bodies;
  for (size_t b = 0; b <= 1100; ++b) bodies.push_back(b);  // every tail and step boundary
  for (size_t b : {4095, 4096, 4097, 32768, 32830, 65000}) bodies.push_back(b);
  int compared = 0;
  for (int k = 0; k < 3; ++k) {
    const auto key = Random(rng, 32);
    Reference ref(key.data());
    const uint8_t zero[16] = {};
    const auto h = ref.Block(zero);
    const Ghash g(h.data());
    for (size_t head_len = 0; head_len <= Ghash::kHeadMax; head_len += (k == 0 ? 1 : 31)) {
      for (size_t body_len : bodies) {
        if (k > 0 && body_len % 7 != 0) continue;
        const auto nonce = Random(rng, 12);
        const auto head = Random(rng, head_len);
        const auto body = Random(rng, body_len);
        uint8_t j0[16] = {};
        std::memcpy(j0, nonce.data(), 12);
        j0[15] = 1;
        const auto mask = ref.Block(j0);
        std::vector<uint8_t> ours(16);
        g.Hash(head.data(), head.size(), body.data(), body.size(), ours.data());
        for (int i = 0; i < 16; ++i) ours[i] ^= mask[i];
        const auto want = ref.Tag(nonce.data(), head, body);
        if (ours != want) {
          INFO("key " << k << " head " << head_len << " body " << body_len);
          CHECK(ours == want);
        }
        ++compared;
      }
    }
  }
  CHECK(compared > 70000);
}

TEST_CASE("a flipped bit anywhere in the body changes the hash", "[ghash]") {
  if (!Ghash::Available()) {
    WARN("this CPU has no AVX-512 VPCLMULQDQ: Ghash not tested here");
    return;
  }
  std::mt19937_64 rng(7);
  const auto h = Random(rng, 16);
  const Ghash g(h.data());
  const auto head = Random(rng, 62);
  auto body = Random(rng, 2000);
  uint8_t base[16], flipped[16];
  g.Hash(head.data(), head.size(), body.data(), body.size(), base);
  for (size_t at : {size_t{0}, size_t{1}, size_t{511}, size_t{512}, size_t{1999}}) {
    body[at] ^= 0x10;
    g.Hash(head.data(), head.size(), body.data(), body.size(), flipped);
    body[at] ^= 0x10;
    CHECK(std::memcmp(base, flipped, 16) != 0);
  }
}

}  // namespace
}  // namespace transport
}  // namespace hetps
