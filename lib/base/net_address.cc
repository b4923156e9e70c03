#include "lib/base/net_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace hetps {

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text) {
  HostPort hp;
  absl::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' is not an address of the form [v6-host]:port"));
    }
    hp.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos || text.find(':') != colon) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "' is not an address of the form host:port"));
    }
    hp.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  if (hp.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has an empty host"));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' has an invalid port (want 0..65535)"));
  }
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

absl::Status ProbeTcpBind(const HostPort& addr) {
  if (addr.port == 0) return absl::OkStatus();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(addr.port);
  int rc = getaddrinfo(addr.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve host '", addr.host, "': ", gai_strerror(rc)));
  }
  absl::Status status = absl::OkStatus();
  int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
  if (fd < 0) {
    status = absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  } else {
    // Same option the real listener uses, so TIME_WAIT leftovers do not count.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 1) != 0) {
      int err = errno;
      status = err == EADDRINUSE ? absl::AlreadyExistsError(std::strerror(err))
                                 : absl::UnavailableError(std::strerror(err));
    }
    close(fd);
  }
  freeaddrinfo(res);
  return status;
}

}  // namespace hetps
