// libFuzzer target for the TCP transport's stream reader: any bytes, read
// in pieces of any size, must come out as the hello and whole frames in
// order, each exactly the stream's bytes at its offset, within the
// reader's fixed buffer. Built and run by tools/fuzz.sh.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "lib/transport/tcp_frames.h"

using hetps::transport::TcpStreamReader;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool hello = (data[0] & 1) != 0;
  const size_t step = 1 + (size_t(data[0] >> 1) << (data[1] & 7));  // 1 .. 16K per read
  const uint8_t* s = data + 2;
  const size_t n = size - 2;
  TcpStreamReader r(hello);
  size_t fed = 0, taken = 0;
  for (;;) {
    const size_t k = std::min({step, r.space_left(), n - fed});
    std::memcpy(r.space(), s + fed, k);
    r.Commit(k);
    fed += k;
    for (;;) {
      const uint8_t* item = nullptr;
      size_t len = 0;
      const TcpStreamReader::Item what = r.Next(&item, &len);
      if (what == TcpStreamReader::Item::kNeedMore) break;
      if (what == TcpStreamReader::Item::kBadMagic || what == TcpStreamReader::Item::kBadVersion) {
        return 0;  // the connection is closed
      }
      if (len == 0 || taken + len > fed) std::abort();
      if (std::memcmp(item, s + taken, len) != 0) std::abort();
      taken += len;
    }
    if (r.buffered() != fed - taken) std::abort();
    r.Compact();
    if (k == 0 && fed == n) break;          // all fed, nothing whole left
    if (r.space_left() == 0) std::abort();  // a partial frame always fits
  }
  return 0;
}
