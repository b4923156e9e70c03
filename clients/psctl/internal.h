// Shared by psctl's command files (not an API): rendering helpers and how
// a command reaches daemons other than its --endpoint.
#ifndef HETPS_CLIENTS_PSCTL_INTERNAL_H_
#define HETPS_CLIENTS_PSCTL_INTERNAL_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "lib/rpc/security.h"

namespace hetps {
namespace psctl {

std::string Bytes(uint64_t b);
// "4.2s", "37s", "12m", "3h" since unix_ms ("-" for 0).
std::string Age(int64_t unix_ms, absl::Time now);
// Left-aligned columns, two spaces apart; every cell escaped.
std::string Table(std::vector<std::vector<std::string>> rows);
// Prints why a call failed; returns the exit code for it.
int RpcFailure(const grpc::Status& s, const std::string& endpoint, std::ostream& err);

// What a command needs to talk to schedd (--endpoint) and to the nodes
// schedd names, with the same credentials.
struct Connection {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;  // to endpoint
  TlsMaterial material;
  std::string token;
  int64_t timeout_ms = 3000;
  bool json = false;
};

// psctl job export [JOB_ID] -o FILE
int ExportCommand(const std::string& job_id, const std::string& file, const Connection& c,
                  std::ostream& out, std::ostream& err);
// psctl checkpoint list [JOB_ID] | show [JOB_ID] [ROUND]
int CheckpointCommand(const std::vector<std::string>& pos, const Connection& c, std::ostream& out,
                      std::ostream& err);

// psctl links: the link matrix schedd holds, with ages.
int LinksCommand(const Connection& c, std::ostream& out, std::ostream& err);
// psctl policy show: the plan in force and the plans before it.
int PolicyCommand(const std::vector<std::string>& pos, const Connection& c, std::ostream& out,
                  std::ostream& err);

}  // namespace psctl
}  // namespace hetps

#endif  // HETPS_CLIENTS_PSCTL_INTERNAL_H_
