#include "lib/transport/datagram_socket.h"

#include <arpa/inet.h>

#include "absl/strings/str_cat.h"

namespace hetps {
namespace transport {

sockaddr_in Peer::ToSockaddr() const {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip;
  a.sin_port = port;
  return a;
}

Peer Peer::FromSockaddr(const sockaddr_in& a) { return Peer{a.sin_addr.s_addr, a.sin_port}; }

std::string Peer::ToString() const {
  char buf[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ip;
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return absl::StrCat(buf, ":", ntohs(port));
}

absl::StatusOr<Peer> ResolvePeer(const HostPort& addr) {
  std::string host = addr.host == "localhost" ? "127.0.0.1" : addr.host;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data plane: '", addr.host, "' is not a numeric IPv4 address"));
  }
  return Peer{a.s_addr, htons(addr.port)};
}

}  // namespace transport
}  // namespace hetps
