// Host:port addresses as they appear in config and on the wire.
// Pure functions; thread-safe.
#ifndef HETPS_LIB_BASE_NET_ADDRESS_H_
#define HETPS_LIB_BASE_NET_ADDRESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hetps {

struct HostPort {
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;

  // "host:port", with brackets around IPv6 hosts.
  std::string ToString() const;
  bool IsWildcard() const { return host == "0.0.0.0" || host == "::"; }
};

// Parses "host:port" or "[v6]:port". Port 0 means "any free port".
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text);

// Binds (and immediately closes) a TCP socket on `addr` to learn whether the
// port is free, so "address already in use" can be reported precisely before
// a library hides the errno. Port 0 always succeeds.
absl::Status ProbeTcpBind(const HostPort& addr);

}  // namespace hetps

#endif  // HETPS_LIB_BASE_NET_ADDRESS_H_
