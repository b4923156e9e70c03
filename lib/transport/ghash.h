// Ghash: the hash of AES-GCM (NIST SP 800-38D, section 6.4) over
// authenticated data only, vectorized for CPUs with AVX-512 and VPCLMULQDQ.
//
// Why our own: PacketAuth tags every datagram with AES-256-GCM over the
// datagram (GMAC). Neither libsodium nor Debian's OpenSSL 3.0 uses 512-bit
// carry-less multiplies for the hash, and on the data plane's large
// datagrams the hash was the largest cost per byte after the kernel's
// copies. This computes the same function (PacketAuth's tests compare its
// tags with OpenSSL's, byte for byte, over many lengths and splits): 32
// blocks per step, multiplied by H^32..H^1 and summed before one
// reduction. The rest of GCM (the block cipher that makes H and masks the
// hash) stays with OpenSSL.
//
// A Ghash is keyed once (16 bytes of H) and then only read: Hash may run
// on several threads at once. Construct only where Available().
#ifndef HETPS_LIB_TRANSPORT_GHASH_H_
#define HETPS_LIB_TRANSPORT_GHASH_H_

#include <cstddef>
#include <cstdint>

namespace hetps {
namespace transport {

class Ghash {
 public:
  // Whether this CPU (and OS) runs the vector code: AVX-512 F/BW/VL,
  // VPCLMULQDQ and PCLMUL. Asked once per process.
  static bool Available();

  // The hash key H = AES_K(0^128), as the 16 bytes the cipher produced.
  explicit Ghash(const uint8_t h[16]);

  // GHASH of the authenticated data A = head || body with no ciphertext:
  // A zero-padded to whole blocks, then the length block (bit length of A,
  // 0). head_len at most kHeadMax. Writes 16 bytes to `out` (XOR with
  // AES_K(J0) to make the GCM tag).
  static constexpr size_t kHeadMax = 96;
  // Blocks multiplied per reduction.
  static constexpr size_t kStepBlocks = 32;
  void Hash(const uint8_t* head, size_t head_len, const uint8_t* body, size_t body_len,
            uint8_t out[16]) const;

 private:
  // H^1..H^32 in the multiplier's form (bytes reversed). powers_[i] is
  // H^(i+1).
  alignas(64) uint8_t powers_[kStepBlocks][16];
  // The same, ordered for a step: lane l of vector 2j holds
  // H^(kStepBlocks - 4j - l), and the low 8 bytes of lane l of vector
  // 2j + 1 the XOR of that power's two halves (Karatsuba's middle term).
  alignas(64) uint8_t step_[kStepBlocks / 2][64] = {};
};

}  // namespace transport
}  // namespace hetps

#endif  // HETPS_LIB_TRANSPORT_GHASH_H_
