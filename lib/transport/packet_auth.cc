#include "lib/transport/packet_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sodium.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/transport/ghash.h"

namespace hetps {
namespace transport {

absl::StatusOr<DataKey> DataKeyFromBytes(uint8_t id, const std::string& bytes) {
  if (bytes.size() != kDataKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("data key of ", bytes.size(), " bytes (", kDataKeyBytes, " expected)"));
  }
  DataKey k;
  k.id = id;
  std::memcpy(k.bytes.data(), bytes.data(), kDataKeyBytes);
  k.set = true;
  return k;
}

absl::StatusOr<std::string> RandomKeyBytes() {
  std::string out(kDataKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), int(out.size())) != 1) {
    return absl::InternalError("data key: the OS's random source failed (RAND_bytes)");
  }
  return out;
}

uint64_t RandomU64() {
  uint64_t v = 0;
  // RAND_bytes fails only without an entropy source, where nothing secure
  // can be done at all: a broken invariant, not an input error.
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof(v)) != 1) std::abort();
  return v;
}

// ---- ReplayWindow -------------------------------------------------------------

bool ReplayWindow::Fresh(uint64_t pn) const {
  if (!any_ || pn > highest_) return true;
  if (highest_ - pn >= kWindow) return false;  // older than the window
  return ((bits_[(pn / 64) % kWords] >> (pn % 64)) & 1) == 0;
}

void ReplayWindow::Commit(uint64_t pn) {
  if (!any_ || pn > highest_) {
    // Clear the slots between the old highest and pn: they now stand for
    // numbers not seen yet (all of them when the jump passes the window).
    const uint64_t from = any_ ? highest_ + 1 : pn;
    if (!any_ || pn - from >= kWindow) {
      bits_.fill(0);
    } else {
      for (uint64_t q = from; q < pn; ++q) bits_[(q / 64) % kWords] &= ~(uint64_t{1} << (q % 64));
    }
    highest_ = pn;
    any_ = true;
  }
  bits_[(pn / 64) % kWords] |= uint64_t{1} << (pn % 64);
}

// ---- PacketAuth ---------------------------------------------------------------

namespace {

// libsodium's AES-GCM needs AES-NI and PCLMUL; asked once per process.
bool SodiumAesGcm() {
  static const bool ok = sodium_init() >= 0 && crypto_aead_aes256gcm_is_available() == 1;
  return ok;
}

// From this many bytes of body OpenSSL's incremental GMAC is the faster:
// libsodium needs the authenticated data in one buffer, and copying the
// body there costs more than OpenSSL's higher per-call overhead saves.
constexpr size_t kOpensslFromBytes = 4096;

}  // namespace

struct PacketAuth::Ctx {
  bool sodium = false;
  crypto_aead_aes256gcm_state state;  // libsodium: the expanded key
  EVP_CIPHER_CTX* evp = nullptr;      // OpenSSL's AES-GCM
  // kVector: the hash, and AES-ECB for the block that masks it.
  std::unique_ptr<Ghash> ghash;
  EVP_CIPHER_CTX* ecb = nullptr;
  ~Ctx() {
    if (evp != nullptr) EVP_CIPHER_CTX_free(evp);
    if (ecb != nullptr) EVP_CIPHER_CTX_free(ecb);
    sodium_memzero(&state, sizeof(state));
  }
};

PacketAuth::PacketAuth(bool authenticate, std::function<uint64_t()> draw_sender, MacBackend backend)
    : authenticate_(authenticate), draw_sender_(std::move(draw_sender)), backend_(backend) {}

PacketAuth::~PacketAuth() = default;

const char* PacketAuth::backend() const {
  if (ctx_ == nullptr) return "none";
  if (ctx_->ghash != nullptr) return "vector";
  return ctx_->sodium ? "libsodium" : "openssl";
}

uint64_t PacketAuth::NextPacketNumber() {
  // The nonce holds 32 bits of the number: a new sender value before they
  // wrap.
  if (next_pn_ == (uint64_t{1} << 32)) {
    sender_ = draw_sender_();
    next_pn_ = 0;
  }
  return next_pn_++;
}

void PacketAuth::SetKey(const DataKey& key) {
  key_ = key;
  sender_ = draw_sender_();
  next_pn_ = 0;
  windows_.clear();
  ctx_.reset();
  if (!key.set || !authenticate_) return;
  ctx_ = std::make_unique<Ctx>();
  const bool any = backend_ == MacBackend::kFastest;
  if ((any || backend_ == MacBackend::kVector) && Ghash::Available()) {
    ctx_->ecb = EVP_CIPHER_CTX_new();
    uint8_t h[16] = {};
    int n = 0;
    // Out of memory or a libcrypto without AES: nothing sensible to do.
    if (ctx_->ecb == nullptr ||
        EVP_EncryptInit_ex(ctx_->ecb, EVP_aes_256_ecb(), nullptr, key.bytes.data(), nullptr) != 1 ||
        EVP_CIPHER_CTX_set_padding(ctx_->ecb, 0) != 1 ||
        EVP_EncryptUpdate(ctx_->ecb, h, &n, h, sizeof(h)) != 1 || n != sizeof(h)) {
      std::abort();
    }
    ctx_->ghash = std::make_unique<Ghash>(h);  // H = AES_K(0^128)
    OPENSSL_cleanse(h, sizeof(h));
    return;
  }
  if ((any || backend_ == MacBackend::kLibsodium) && SodiumAesGcm()) {
    ctx_->sodium = true;
    crypto_aead_aes256gcm_beforenm(&ctx_->state, key.bytes.data());
  }
  ctx_->evp = EVP_CIPHER_CTX_new();
  if (ctx_->evp == nullptr ||
      EVP_EncryptInit_ex(ctx_->evp, EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx_->evp, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx_->evp, nullptr, nullptr, key.bytes.data(), nullptr) != 1) {
    std::abort();
  }
}

bool PacketAuth::Tag(const Peer& addr, const uint8_t* head, const uint8_t* body, size_t body_len,
                     uint8_t* tag_out) {
  // Nonce: sender (8 bytes) and the packet number's low 4, as on the wire.
  const uint8_t* nonce = head + 8;
  uint8_t addr_bytes[6];
  std::memcpy(addr_bytes, &addr.ip, 4);
  std::memcpy(addr_bytes + 4, &addr.port, 2);
  if (ctx_->ghash != nullptr) {
    static_assert(sizeof(addr_bytes) + kTagOffset <= Ghash::kHeadMax);
    uint8_t prefix[sizeof(addr_bytes) + kTagOffset];
    std::memcpy(prefix, addr_bytes, sizeof(addr_bytes));
    std::memcpy(prefix + sizeof(addr_bytes), head, kTagOffset);
    uint8_t s[16];
    ctx_->ghash->Hash(prefix, sizeof(prefix), body, body_len, s);
    // GCM's first counter block for a 96-bit nonce: nonce || 0^31 || 1;
    // its encryption masks the hash.
    uint8_t j0[16] = {};
    std::memcpy(j0, nonce, 12);
    j0[15] = 1;
    uint8_t mask[16];
    int n = 0;
    if (EVP_EncryptUpdate(ctx_->ecb, mask, &n, j0, sizeof(j0)) != 1 || n != sizeof(mask)) {
      return false;
    }
    for (size_t i = 0; i < kTagBytes; ++i) tag_out[i] = s[i] ^ mask[i];
    return true;
  }
  if (ctx_->sodium && body_len < kOpensslFromBytes) {
    // One contiguous buffer of authenticated data (libsodium has no
    // incremental AES-GCM).
    scratch_.resize(sizeof(addr_bytes) + kTagOffset + body_len);
    std::memcpy(scratch_.data(), addr_bytes, sizeof(addr_bytes));
    std::memcpy(scratch_.data() + sizeof(addr_bytes), head, kTagOffset);
    if (body_len > 0)
      std::memcpy(scratch_.data() + sizeof(addr_bytes) + kTagOffset, body, body_len);
    unsigned long long tag_len = 0;
    uint8_t no_ciphertext[1];  // nothing is encrypted; the API wants a buffer
    return crypto_aead_aes256gcm_encrypt_detached_afternm(no_ciphertext, tag_out, &tag_len, nullptr,
                                                          0, scratch_.data(), scratch_.size(),
                                                          nullptr, nonce, &ctx_->state) == 0;
  }
  EVP_CIPHER_CTX* c = ctx_->evp;
  int n = 0;
  uint8_t unused[16];
  return EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, nonce) == 1 &&
         EVP_EncryptUpdate(c, nullptr, &n, addr_bytes, sizeof(addr_bytes)) == 1 &&
         EVP_EncryptUpdate(c, nullptr, &n, head, int(kTagOffset)) == 1 &&
         (body_len == 0 || EVP_EncryptUpdate(c, nullptr, &n, body, int(body_len)) == 1) &&
         EVP_EncryptFinal_ex(c, unused, &n) == 1 &&
         EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, int(kTagBytes), tag_out) == 1;
}

void PacketAuth::Seal(const Peer& self, uint8_t* head, const uint8_t* body, size_t body_len) {
  if (ctx_ == nullptr) return;  // not authenticating: the tag stays zero
  if (!Tag(self, head, body, body_len, head + kTagOffset)) std::abort();
}

DropReason PacketAuth::CheckKey(const Header& h) const {
  return key_.set && h.key_id == key_.id ? DropReason::kNone : DropReason::kStaleKey;
}

DropReason PacketAuth::Verify(const Peer& from, const Header& h, const uint8_t* head,
                              const uint8_t* body, size_t body_len) {
  if (CheckKey(h) != DropReason::kNone) return DropReason::kStaleKey;
  if (ctx_ == nullptr) return DropReason::kNone;  // not authenticating
  const SenderKey sk{from, h.sender};
  auto it = windows_.find(sk);
  if (it != windows_.end() && !it->second.Fresh(h.packet_number)) return DropReason::kReplayed;
  uint8_t tag[kTagBytes];
  if (!Tag(from, head, body, body_len, tag) ||
      CRYPTO_memcmp(tag, head + kTagOffset, kTagBytes) != 0) {
    return DropReason::kForged;
  }
  if (it == windows_.end()) {
    if (windows_.size() >= kSendersMax) return DropReason::kOverBudget;
    it = windows_.emplace(sk, ReplayWindow()).first;
  }
  it->second.Commit(h.packet_number);
  return DropReason::kNone;
}

}  // namespace transport
}  // namespace hetps
