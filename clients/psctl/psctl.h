// psctl: the hetps admin CLI, as a library so tests can run it in-process.
//
//   psctl [--endpoint HOST:PORT] [--timeout_ms N] [-o table|json] COMMAND
//   COMMAND: status | nodes [--all] | config | drain | job submit FILE |
//            job status [JOB_ID] | job cancel [JOB_ID] |
//            job export [JOB_ID] -o FILE | checkpoint list|show ... | help
//
// Data goes to `out`, errors to `err`. Exit codes (stable, documented in
// docs/psctl.md): 0 ok, 1 the daemon answered with an error, 2 usage,
// 4 endpoint unavailable (unreachable or deadline exceeded).
#ifndef HETPS_CLIENTS_PSCTL_PSCTL_H_
#define HETPS_CLIENTS_PSCTL_PSCTL_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/hetps/v1/admin.pb.h"
#include "proto/hetps/v1/scheduler.pb.h"

namespace hetps {
namespace psctl {

enum ExitCode { kOk = 0, kError = 1, kUsage = 2, kUnavailable = 4 };

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Pure renderers (exposed for tests). `now` turns timestamps into ages.
std::string NodesTable(const v1::ListNodesResponse& resp, absl::Time now);
std::string NodesJson(const v1::ListNodesResponse& resp, absl::Time now);
std::string StatusTable(const v1::GetStatusResponse& resp, absl::Time now);
std::string StatusJson(const v1::GetStatusResponse& resp, absl::Time now);
std::string ConfigTable(const v1::GetConfigResponse& resp);
std::string ConfigJson(const v1::GetConfigResponse& resp);
std::string JobStateName(v1::JobState state);
std::string JobStatusTable(const v1::JobStatus& job, absl::Time now);
std::string JobStatusJson(const v1::JobStatus& job, absl::Time now);

}  // namespace psctl
}  // namespace hetps

#endif  // HETPS_CLIENTS_PSCTL_PSCTL_H_
