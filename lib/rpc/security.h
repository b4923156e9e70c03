// The control plane's security: TLS with client certificates (mTLS) for
// daemons, a client certificate or a bearer token for psctl, and who may
// call what (docs/security.md).
//
// Identities come from certificates signed by the cluster's CA: the
// subject's CN is the identity's name (a node id, or an administrator's
// name) and its OU the role: "node" or "admin". A bearer token (gRPC
// metadata "authorization: Bearer TOKEN", only over TLS) names an admin;
// servers keep only SHA-256 hashes of the tokens they accept
// (admin_tokens_file).
//
// Roles: a node identity may Register, Heartbeat, Deregister and
// ReportLinks for its own node id only; an admin identity may submit and
// cancel jobs and drain daemons; any authenticated identity may read
// (ListNodes, WatchMembership, GetPolicy, GetJob, GetStatus, GetConfig).
// Refusals are UNAUTHENTICATED (no identity) or PERMISSION_DENIED (the
// wrong one), counted in <d>_rpc_refused_total{method, reason}.
//
// With `insecure: true` there is no TLS and every call is allowed; daemons
// refuse to start without TLS unless it is set, and warn when it is.
// Thread-safe after construction.
#ifndef HETPS_LIB_RPC_SECURITY_H_
#define HETPS_LIB_RPC_SECURITY_H_

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"

namespace hetps {

struct TlsConfig {
  std::string tls_ca;    // PEM file: the CA that signs every identity
  std::string tls_cert;  // PEM file: this program's certificate
  std::string tls_key;   // PEM file: its private key
  // Servers: a file of "sha256:HEX" lines, the bearer tokens accepted as
  // admin identities (tools/dev-certs.sh writes one). Empty: none.
  std::string admin_tokens_file;
  bool insecure = false;  // no TLS, no authentication (warned at every start)
};

void DeclareTlsConfig(ConfigSchema* schema, TlsConfig* config);

enum class Role { kNone, kNode, kAdmin };
const char* RoleName(Role role);

// What a program presents and trusts, read and checked once at start.
struct TlsMaterial {
  bool insecure = false;
  std::string ca_pem, cert_pem, key_pem;
  std::string name;  // the certificate's CN
  Role role = Role::kNone;
  std::vector<std::string> admin_token_hashes;  // lowercase hex SHA-256
};

// Reads and checks the files: each readable and PEM, the certificate
// signed by the CA and matching the key, its CN and OU present. Clear
// errors name the key and file. `insecure` with no files: insecure
// material. Neither: an error saying how to set TLS up.
absl::StatusOr<TlsMaterial> LoadTls(const TlsConfig& config);

// A client's material (psctl, tests): the CA, and a certificate and key
// when both are given (a token-only client has none). Same checks as
// LoadTls for what is there.
absl::StatusOr<TlsMaterial> LoadClientTls(const TlsConfig& config);

// Reads a bearer token file (one line, at most 4 KiB).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The CN and role (OU) of a PEM certificate.
absl::Status CertificateIdentity(const std::string& pem, std::string* name, Role* role);
// Lowercase hex SHA-256 of a token.
std::string TokenHash(const std::string& token);

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsMaterial& m);
// A channel to `target` presenting `m` (a client certificate when it has
// one); `bearer_token`, when not empty, goes with every call.
std::shared_ptr<grpc::Channel> MakeSecureChannel(const std::string& target, const TlsMaterial& m,
                                                 const std::string& bearer_token = "");

// Decides, per call, who is calling and whether they may.
class Authorizer {
 public:
  // `registry` (may be null) gets <prefix>_rpc_refused_total.
  Authorizer(const TlsMaterial& m, prometheus::Registry* registry, const std::string& prefix);

  struct Caller {
    Role role = Role::kNone;
    std::string name;  // CN, or "token:<first 8 hex of its hash>"
  };
  Caller Identify(const grpc::ServerContext* ctx) const;

  // OK, or the status to answer with (counted).
  grpc::Status RequireNode(const grpc::ServerContext* ctx, const std::string& node_id,
                           const char* method) const;
  grpc::Status RequireAdmin(const grpc::ServerContext* ctx, const char* method) const;
  grpc::Status RequireAny(const grpc::ServerContext* ctx, const char* method) const;

 private:
  grpc::Status Refuse(grpc::StatusCode code, const char* method, const std::string& why) const;
  grpc::Status Unauthenticated(const char* method) const;

  const bool insecure_;
  const std::vector<std::string> token_hashes_;
  prometheus::Family<prometheus::Counter>* refused_ = nullptr;
};

}  // namespace hetps

#endif  // HETPS_LIB_RPC_SECURITY_H_
