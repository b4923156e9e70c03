// Conversions between lib/membership structs and hetps.v1 messages.
// Pure; thread-safe.
#ifndef HETPS_LIB_RPC_MEMBERSHIP_PROTO_H_
#define HETPS_LIB_RPC_MEMBERSHIP_PROTO_H_

#include "lib/membership/membership.h"
#include "proto/hetps/v1/common.pb.h"
#include "proto/hetps/v1/scheduler.pb.h"

namespace hetps {

v1::Role RoleToProto(NodeRole role);
NodeRole RoleFromProto(v1::Role role);
v1::NodeState StateToProto(NodeState state);
void CapabilitiesToProto(const Capabilities& in, v1::Capabilities* out);
Capabilities CapabilitiesFromProto(const v1::Capabilities& in);
void NodeToProto(const NodeRecord& in, v1::NodeInfo* out);
void EventToProto(const MembershipEvent& in, v1::MembershipEvent* out);

}  // namespace hetps

#endif  // HETPS_LIB_RPC_MEMBERSHIP_PROTO_H_
