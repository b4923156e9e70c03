// JobRunner with a job part that only waits to be stopped: what the link
// meter counts of the flows its node receives.
#include "lib/daemon/job_runner.h"

#include <arpa/inet.h>

#include <numeric>

#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "lib/base/clock.h"
#include "lib/transport/test_flows.h"

namespace hetps {
namespace {

class WaitingPart : public JobRunner {
 public:
  explicit WaitingPart(std::string node_id) : JobRunner(Logger(), std::move(node_id)) {}
  ~WaitingPart() override { Shutdown(); }
  absl::Notification running;

 protected:
  absl::Status RunJob(const v1::JobAssignment& a, const JobSpec&) override {
    running.Notify();
    v1::JobAssignment latest;
    uint64_t roster = a.roster_version();
    while (WaitUpdate(absl::InfiniteDuration(), roster, &latest)) {
      roster = latest.roster_version();
    }
    return absl::OkStatus();
  }
  void StopJob() override {}
  void FillProgress(v1::NodeJobReport*) override {}
};

void AddMember(google::protobuf::RepeatedPtrField<v1::JobMember>* to, const std::string& id,
               const std::string& address, uint32_t rank) {
  v1::JobMember* m = to->Add();
  m->set_node_id(id);
  m->set_data_address(address);
  m->set_rank(rank);
  m->set_alive(true);
}

using transport::testing::ReceivedFlow;

// The flows between a host's own nodes never cross its access link, and
// its traffic (what schedd reads a loaded host's throughput from) leaves
// them out from a job's start: also when the job came with the node's
// first heartbeat, before it ever reported links (the node's id used to
// come from that report; a node without it counted its host's own flows
// for the whole job).
TEST_CASE("a node's traffic leaves out its host's own flows from the job's first flow", "[links]") {
  WaitingPart psd("psd-0");
  psd.Start();
  v1::JobAssignment a;
  a.set_job_id("job-traffic");
  a.set_spec_yaml("iterations: 10\nload_policy: adlb\n");
  a.set_roster_version(1);
  a.set_state(v1::JOB_STATE_RUNNING);
  AddMember(a.mutable_servers(), "psd-0", "10.0.0.1:7000", 0);
  AddMember(a.mutable_servers(), "psd-1", "10.0.0.2:7000", 1);
  AddMember(a.mutable_workers(), "worker-0", "10.0.0.1:7001", 0);
  AddMember(a.mutable_workers(), "worker-1", "10.0.0.2:7001", 1);
  psd.OnJobAssignment(a);
  REQUIRE(psd.running.WaitForNotificationWithTimeout(absl::Seconds(20)));

  // Over the last 100 ms: 1 MB from the worker beside it (its own host),
  // 10 KB from the other host's worker.
  const uint64_t now = RealClock::Get()->MonotonicMicros();
  const transport::Peer beside{htonl(0x0A000001), htons(7001)};
  const transport::Peer other{htonl(0x0A000002), htons(7001)};
  psd.link_meter().OnFlow(beside, ReceivedFlow(1'000'000, 100, now - 100'000, now));
  psd.link_meter().OnFlow(other, ReceivedFlow(10'000, 10, now - 100'000, now));
  v1::ReportLinksRequest req;
  psd.TakeLinkReports("psd-0", &req);
  REQUIRE(req.has_traffic());
  const uint64_t in = std::accumulate(req.traffic().in_bytes().begin(),
                                      req.traffic().in_bytes().end(), uint64_t{0});
  // The other host's payload and its datagrams' headers, rounded per bin.
  CHECK(in >= 10'000);
  CHECK(in < 20'000);
}

}  // namespace
}  // namespace hetps
