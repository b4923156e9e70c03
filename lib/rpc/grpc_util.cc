#include "lib/rpc/grpc_util.h"

#include "absl/strings/str_cat.h"
#include "lib/base/net_address.h"
#include "lib/base/status_macros.h"

namespace hetps {

absl::StatusOr<StartedGrpcServer> StartGrpcServer(
    const std::string& listen, const std::string& config_key,
    const std::vector<grpc::Service*>& services,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(listen));
  absl::Status probe = ProbeTcpBind(hp);
  if (!probe.ok()) {
    return absl::Status(probe.code(), absl::StrCat("cannot listen on ", listen, " (", config_key,
                                                   "): ", probe.message()));
  }
  grpc::ServerBuilder builder;
  StartedGrpcServer out;
  if (credentials == nullptr) credentials = grpc::InsecureServerCredentials();
  builder.AddListeningPort(hp.ToString(), credentials, &out.port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Bound message size: control messages are small; a policy for 1000 nodes
  // fits well within 16 MiB.
  builder.SetMaxReceiveMessageSize(16 << 20);
  for (grpc::Service* s : services) builder.RegisterService(s);
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen, " (", config_key,
                                               "): gRPC could not bind the address"));
  }
  return out;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share the canonical numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  grpc::ChannelArguments args;
  // Reconnect promptly after a peer restarts (default backoff reaches 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
}

}  // namespace hetps
