#include "lib/daemon/job_runner.h"

#include "lib/daemon/data_plane.h"

namespace hetps {
namespace {

bool Ended(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

}  // namespace

JobRunner::JobRunner(Logger logger, std::string node_id)
    : log_(std::move(logger)), self_(std::move(node_id)) {}

JobRunner::~JobRunner() { Shutdown(); }

void JobRunner::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void JobRunner::Shutdown() {
  bool stop_job;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_ && !thread_.joinable()) return;
    shutdown_ = true;
    stop_job = running_;
    stop_ = true;
    changed_.SignalAll();
  }
  if (stop_job) StopJob();
  if (thread_.joinable()) thread_.join();
}

void JobRunner::MarkReady() {
  absl::MutexLock lock(&mu_);
  // A run asked to stop is not the one being reported (a recovery epoch
  // may have replaced it).
  if (!stop_) ready_ = true;
}

bool JobRunner::WaitUpdate(absl::Duration timeout, uint64_t known_roster,
                           v1::JobAssignment* latest) {
  absl::MutexLock lock(&mu_);
  auto newer = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stop_ || current_.roster_version() > known_roster;
  };
  mu_.AwaitWithTimeout(absl::Condition(&newer), timeout);
  *latest = current_;
  return !stop_;
}

bool JobRunner::StopRequested() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

bool JobRunner::FillJobReport(v1::NodeJobReport* r) {
  OnHeartbeatTick();
  {
    absl::MutexLock lock(&mu_);
    if (!has_job_) return false;
    r->set_job_id(current_.job_id());
    r->set_roster_version(current_.roster_version());
    r->set_recovery_epoch(current_.recovery_epoch());
    r->set_ready(ready_);
    r->set_done(done_);
    r->set_error(error_);
    if (pending_.has_value()) return true;  // not started: no progress yet
  }
  FillProgress(r);
  return true;
}

void JobRunner::TakeLinkReports(const std::string& self, v1::ReportLinksRequest* out) {
  absl::flat_hash_map<std::string, std::string> names;
  {
    absl::MutexLock lock(&mu_);
    if (!has_job_ || !adaptive_) return;
    names = PeerNamesOf(current_);
  }
  NodeTraffic traffic;
  if (meter_.TakeTraffic(kTrafficReportBins, &traffic)) {
    v1::NodeTraffic* t = out->mutable_traffic();
    t->set_first_bin_unix_ms(traffic.first_bin_unix_ms);
    t->set_bin_ms(traffic.bin_ms);
    t->mutable_in_bytes()->Assign(traffic.in_bytes.begin(), traffic.in_bytes.end());
  }
  std::vector<LinkSample> changed = meter_.TakeChanged();
  if (changed.empty()) return;
  const std::vector<transport::PeerEstimate> peers = PeerEstimates();
  for (const LinkSample& s : changed) {
    auto name = names.find(s.from.ToString());
    if (name == names.end()) continue;  // not a member of this job
    v1::LinkReport l;
    l.set_from_node_id(name->second);
    l.set_to_node_id(self);
    l.set_throughput_bytes_per_second(s.bytes_per_s);
    l.set_bytes_observed(s.bytes);
    l.set_flow_bytes(s.flow_bytes);
    l.set_sample_age_ms(s.age_us / 1000);
    for (const LinkSample::Probe& p : s.probes) {
      v1::LinkProbe* probe = l.add_probes();
      probe->set_bytes_per_second(p.bytes_per_s);
      probe->set_age_ms(p.age_us / 1000);
    }
    for (const transport::PeerEstimate& p : peers) {
      if (p.peer == s.from && p.rtprop_us > 0) l.set_rtt_ms(p.rtprop_us / 1e3);
    }
    *out->add_links() = std::move(l);
  }
}

void JobRunner::OnJobAssignment(const v1::JobAssignment& a) {
  bool stop_job = false;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    const bool same_job = has_job_ && a.job_id() == current_.job_id();
    const bool recovery = same_job && !Ended(a.state()) &&
                          a.recovery_epoch() > current_.recovery_epoch() &&
                          a.roster_version() > current_.roster_version();
    if (same_job && !recovery) {
      if (a.roster_version() <= current_.roster_version()) return;
      current_ = a;
      if (Ended(a.state())) {
        log_.Info("job ended", {{"job_id", a.job_id()}, {"state", v1::JobState_Name(a.state())}});
        has_job_ = false;
        if (pending_.has_value()) pending_.reset();
        stop_job = running_ && !stop_;
        stop_ = stop_ || running_;
      }
    } else {
      if (Ended(a.state())) return;  // about a job this node does not run
      if (recovery) {
        // Its part restarts from the checkpoint round schedd names.
        log_.Warn("job recovering: restarting this node's part",
                  {{"job_id", a.job_id()}, {"recovery_epoch", a.recovery_epoch()}});
      } else {
        log_.Info(
            "job assigned",
            {{"job_id", a.job_id()}, {"servers", a.servers_size()}, {"workers", a.workers_size()}});
      }
      stop_job = running_ && !stop_;
      stop_ = stop_ || running_;
      pending_ = a;
      has_job_ = true;
      current_ = a;
      ready_ = done_ = false;
      error_.clear();
    }
    changed_.SignalAll();
  }
  if (stop_job) StopJob();
}

void JobRunner::Loop() {
  for (;;) {
    v1::JobAssignment a;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]()
                      ABSL_SHARED_LOCKS_REQUIRED(mu_) { return shutdown_ || pending_.has_value(); };
      mu_.Await(absl::Condition(&wake));
      if (shutdown_) return;
      a = std::move(*pending_);
      pending_.reset();
      running_ = true;
      stop_ = false;
    }
    absl::Status s;
    absl::StatusOr<JobSpec> spec = ParseJobSpec(a.spec_yaml(), a.job_id());
    // Links are measured afresh for each job (other peers, other paths),
    // and flows from this host's other nodes never cross its access link:
    // counted, they read a host's traffic above its link.
    meter_.Reset();
    meter_.SetLocalIp(DataIpOf(a, self_));
    if (spec.ok()) {
      // A sample older than schedd's window says nothing it reads.
      meter_.SetConfig({uint64_t(spec->probe_chunk_bytes), uint32_t(spec->probe_chunk_num),
                        spec->report_rate,
                        uint64_t(MeasureWindowMs(spec->update_time_s * 1000)) * 1000});
    }
    {
      absl::MutexLock lock(&mu_);
      adaptive_ = spec.ok() && spec->adaptive();
    }
    s = spec.ok() ? RunJob(a, *spec) : spec.status();
    absl::MutexLock lock(&mu_);
    running_ = false;
    const bool same = has_job_ && current_.job_id() == a.job_id();
    if (stop_ || !same) {
      log_.Info("job stopped", {{"job_id", a.job_id()}});
    } else if (s.ok()) {
      done_ = true;
      log_.Info("job part done", {{"job_id", a.job_id()}});
    } else {
      error_ = std::string(s.message());
      log_.Error("job part failed", {{"job_id", a.job_id()}, {"error", error_}});
    }
  }
}

std::string JobRunner::ActiveJob() const {
  absl::MutexLock lock(&mu_);
  if (!has_job_ || done_ || Ended(current_.state())) return "";
  return current_.job_id();
}

}  // namespace hetps
