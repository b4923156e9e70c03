// gRPC edge helpers: starting a server with precise bind errors, and
// converting between absl::Status and grpc::Status (only here, at the edge).
// Stateless; thread-safe.
#ifndef HETPS_LIB_RPC_GRPC_UTIL_H_
#define HETPS_LIB_RPC_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace hetps {

struct StartedGrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // bound port (resolved when 0 was asked for)
};

// Starts a gRPC server on `listen` (host:port) with `services` and
// `credentials` (security.h; null: insecure).
// SO_REUSEPORT is disabled so a second daemon on the same port fails instead
// of silently sharing it. Errors name `config_key`, e.g.
//   cannot listen on 127.0.0.1:7070 (listen): Address already in use
absl::StatusOr<StartedGrpcServer> StartGrpcServer(
    const std::string& listen, const std::string& config_key,
    const std::vector<grpc::Service*>& services,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// An insecure client channel to `target` (host:port); clusters with TLS use
// MakeSecureChannel (security.h).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);

// Sets a deadline `timeout` from now on `ctx`.
void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout);

}  // namespace hetps

#endif  // HETPS_LIB_RPC_GRPC_UTIL_H_
