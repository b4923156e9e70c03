#include "lib/rpc/membership_proto.h"

namespace hetps {

v1::Role RoleToProto(NodeRole role) {
  switch (role) {
    case NodeRole::kScheduler:
      return v1::ROLE_SCHEDULER;
    case NodeRole::kServer:
      return v1::ROLE_SERVER;
    case NodeRole::kWorker:
      return v1::ROLE_WORKER;
    case NodeRole::kUnspecified:
      break;
  }
  return v1::ROLE_UNSPECIFIED;
}

NodeRole RoleFromProto(v1::Role role) {
  switch (role) {
    case v1::ROLE_SCHEDULER:
      return NodeRole::kScheduler;
    case v1::ROLE_SERVER:
      return NodeRole::kServer;
    case v1::ROLE_WORKER:
      return NodeRole::kWorker;
    default:
      return NodeRole::kUnspecified;
  }
}

v1::NodeState StateToProto(NodeState state) {
  switch (state) {
    case NodeState::kAlive:
      return v1::NODE_STATE_ALIVE;
    case NodeState::kDead:
      return v1::NODE_STATE_DEAD;
    case NodeState::kLeft:
      return v1::NODE_STATE_LEFT;
  }
  return v1::NODE_STATE_UNSPECIFIED;
}

void CapabilitiesToProto(const Capabilities& in, v1::Capabilities* out) {
  out->set_hostname(in.hostname);
  out->set_cpu_cores(in.cpu_cores);
  out->set_memory_bytes(in.memory_bytes);
  out->set_nccl_version(in.nccl_version);
  for (const GpuInfo& g : in.gpus) {
    v1::GpuDevice* d = out->add_gpus();
    d->set_index(g.index);
    d->set_name(g.name);
    d->set_memory_bytes(g.memory_bytes);
    d->set_compute_capability(g.compute_capability);
  }
}

Capabilities CapabilitiesFromProto(const v1::Capabilities& in) {
  Capabilities c;
  c.hostname = in.hostname();
  c.cpu_cores = in.cpu_cores();
  c.memory_bytes = in.memory_bytes();
  c.nccl_version = in.nccl_version();
  for (const v1::GpuDevice& d : in.gpus()) {
    c.gpus.push_back({d.index(), d.name(), d.memory_bytes(), d.compute_capability()});
  }
  return c;
}

namespace {
int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }
}  // namespace

void NodeToProto(const NodeRecord& in, v1::NodeInfo* out) {
  out->set_node_id(in.node_id);
  out->set_role(RoleToProto(in.role));
  out->set_state(StateToProto(in.state));
  out->set_control_address(in.control_address);
  out->set_data_address(in.data_address);
  out->set_metrics_address(in.metrics_address);
  CapabilitiesToProto(in.capabilities, out->mutable_capabilities());
  out->set_incarnation(in.incarnation);
  out->set_registered_unix_ms(UnixMs(in.registered));
  out->set_last_heartbeat_unix_ms(UnixMs(in.last_heartbeat));
  out->set_version(in.version);
  out->set_state_changed_unix_ms(UnixMs(in.state_changed));
}

void EventToProto(const MembershipEvent& in, v1::MembershipEvent* out) {
  switch (in.kind) {
    case MembershipEventKind::kSnapshot:
      out->set_kind(v1::MembershipEvent::KIND_SNAPSHOT);
      break;
    case MembershipEventKind::kJoined:
      out->set_kind(v1::MembershipEvent::KIND_JOINED);
      break;
    case MembershipEventKind::kDied:
      out->set_kind(v1::MembershipEvent::KIND_DIED);
      break;
    case MembershipEventKind::kLeft:
      out->set_kind(v1::MembershipEvent::KIND_LEFT);
      break;
  }
  out->set_membership_version(in.version);
  if (in.kind == MembershipEventKind::kSnapshot) {
    for (const NodeRecord& n : in.snapshot) NodeToProto(n, out->add_snapshot());
  } else {
    NodeToProto(in.node, out->mutable_node());
  }
}

}  // namespace hetps
