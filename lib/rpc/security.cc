#include "lib/rpc/security.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/escape.h"
#include "lib/base/file.h"

namespace hetps {
namespace {

constexpr size_t kPemBytesMax = 1 << 20;

// A PEM or token file named by config key `key`; errors name the key.
absl::StatusOr<std::string> ReadSmallFile(const std::string& key, const std::string& path) {
  absl::StatusOr<std::string> data = ReadBoundedFile(path, kPemBytesMax);
  if (!data.ok()) {
    return absl::Status(data.status().code(), absl::StrCat(key, ": ", data.status().message()));
  }
  return data;
}

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;

X509Ptr ParseCert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), int(pem.size()));
  if (bio == nullptr) return nullptr;
  X509Ptr x(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return x;
}

KeyPtr ParseKey(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), int(pem.size()));
  if (bio == nullptr) return nullptr;
  KeyPtr k(PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return k;
}

std::string NameEntry(X509_NAME* name, int nid) {
  char buf[256] = {0};
  const int n = X509_NAME_get_text_by_NID(name, nid, buf, sizeof(buf));
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

bool IsHex64(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
  }
  return true;
}

}  // namespace

void DeclareTlsConfig(ConfigSchema* schema, TlsConfig* c) {
  schema->String("tls_ca", &c->tls_ca,
                 "PEM file of the CA that signs every identity of the cluster (control plane "
                 "TLS; tools/dev-certs.sh makes a development CA).");
  schema->String("tls_cert", &c->tls_cert,
                 "PEM file of this daemon's certificate: CN = its node id, OU = node.");
  schema->String("tls_key", &c->tls_key, "PEM file of the certificate's private key.");
  schema->String("admin_tokens_file", &c->admin_tokens_file,
                 "File of 'sha256:HEX' lines: bearer tokens accepted as admin identities "
                 "(psctl --token-file); empty: none.");
  schema->Bool("insecure", &c->insecure,
               "Run the control plane without TLS or authentication (anyone who reaches the "
               "port may register, submit, cancel and drain). Warned at every start.");
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kNode:
      return "node";
    case Role::kAdmin:
      return "admin";
    case Role::kNone:
      break;
  }
  return "none";
}

std::string TokenHash(const std::string& token) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), md, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

absl::Status CertificateIdentity(const std::string& pem, std::string* name, Role* role) {
  X509Ptr cert = ParseCert(pem);
  if (cert == nullptr) return absl::InvalidArgumentError("not a PEM certificate");
  X509_NAME* subject = X509_get_subject_name(cert.get());
  *name = NameEntry(subject, NID_commonName);
  const std::string ou = NameEntry(subject, NID_organizationalUnitName);
  if (name->empty()) return absl::InvalidArgumentError("the certificate has no CN");
  if (ou == "node") {
    *role = Role::kNode;
  } else if (ou == "admin") {
    *role = Role::kAdmin;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("the certificate's OU is '", ou,
                                                   "': it must be 'node' or 'admin' (its role)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsMaterial> LoadTls(const TlsConfig& c) {
  TlsMaterial m;
  const bool any = !c.tls_ca.empty() || !c.tls_cert.empty() || !c.tls_key.empty();
  if (c.insecure) {
    if (any) {
      return absl::InvalidArgumentError(
          "insecure: true and tls_ca/tls_cert/tls_key are both set: choose one");
    }
    m.insecure = true;
    return m;
  }
  if (c.tls_ca.empty() || c.tls_cert.empty() || c.tls_key.empty()) {
    return absl::FailedPreconditionError(
        "the control plane needs TLS: set tls_ca, tls_cert and tls_key (tools/dev-certs.sh "
        "DIR makes a development CA and certificates), or insecure: true to run without "
        "authentication");
  }
  auto ca = ReadSmallFile("tls_ca", c.tls_ca);
  if (!ca.ok()) return ca.status();
  auto cert = ReadSmallFile("tls_cert", c.tls_cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadSmallFile("tls_key", c.tls_key);
  if (!key.ok()) return key.status();
  X509Ptr ca_x = ParseCert(*ca);
  if (ca_x == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_ca: '", c.tls_ca, "' is not a PEM certificate"));
  }
  X509Ptr cert_x = ParseCert(*cert);
  if (cert_x == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_cert: '", c.tls_cert, "' is not a PEM certificate"));
  }
  KeyPtr key_k = ParseKey(*key);
  if (key_k == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key: '", c.tls_key, "' is not a PEM private key"));
  }
  if (X509_check_private_key(cert_x.get(), key_k.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key: '", c.tls_key, "' is not the key of tls_cert '", c.tls_cert, "'"));
  }
  X509_STORE* store = X509_STORE_new();
  X509_STORE_CTX* vctx = X509_STORE_CTX_new();
  X509_STORE_add_cert(store, ca_x.get());
  X509_STORE_CTX_init(vctx, store, cert_x.get(), nullptr);
  const int ok = X509_verify_cert(vctx);
  const int err = X509_STORE_CTX_get_error(vctx);
  X509_STORE_CTX_free(vctx);
  X509_STORE_free(store);
  if (ok != 1) {
    return absl::InvalidArgumentError(absl::StrCat("tls_cert: '", c.tls_cert,
                                                   "' does not verify against tls_ca '", c.tls_ca,
                                                   "': ", X509_verify_cert_error_string(err)));
  }
  if (absl::Status s = CertificateIdentity(*cert, &m.name, &m.role); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tls_cert: '", c.tls_cert, "': ", s.message()));
  }
  m.ca_pem = *ca;
  m.cert_pem = *cert;
  m.key_pem = *key;
  if (!c.admin_tokens_file.empty()) {
    auto tokens = ReadSmallFile("admin_tokens_file", c.admin_tokens_file);
    if (!tokens.ok()) return tokens.status();
    int line_no = 0;
    for (absl::string_view line : absl::StrSplit(*tokens, '\n')) {
      ++line_no;
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line[0] == '#') continue;
      if (!absl::ConsumePrefix(&line, "sha256:") || !IsHex64(line)) {
        return absl::InvalidArgumentError(
            absl::StrCat("admin_tokens_file: '", c.admin_tokens_file, "' line ", line_no,
                         ": expected sha256: and 64 lowercase hex digits"));
      }
      m.admin_token_hashes.emplace_back(line);
    }
  }
  return m;
}

absl::StatusOr<TlsMaterial> LoadClientTls(const TlsConfig& c) {
  if (c.insecure || (!c.tls_cert.empty() && !c.tls_key.empty())) return LoadTls(c);
  if (!c.tls_cert.empty() || !c.tls_key.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key go together: give both or neither");
  }
  if (c.tls_ca.empty()) {
    return absl::FailedPreconditionError(
        "no TLS settings: give the cluster's CA (--tls-ca) and either a client certificate "
        "(--tls-cert, --tls-key) or a bearer token (--token-file), e.g. in a --config file or "
        "$HETPS_PSCTL_CONFIG; or --insecure for a cluster run with insecure: true");
  }
  auto ca = ReadSmallFile("tls_ca", c.tls_ca);
  if (!ca.ok()) return ca.status();
  if (ParseCert(*ca) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_ca: '", c.tls_ca, "' is not a PEM certificate"));
  }
  TlsMaterial m;
  m.ca_pem = *ca;
  return m;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto data = ReadSmallFile("token_file", path);
  if (!data.ok()) return data.status();
  std::string token(absl::StripAsciiWhitespace(*data));
  if (token.empty() || token.size() > 4096 || token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("token_file: '", path, "' must hold one token of 1 to 4096 characters"));
  }
  return token;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const TlsMaterial& m) {
  if (m.insecure) return grpc::InsecureServerCredentials();
  // Request a client certificate and verify it when one is given; a client
  // without one (psctl with a token) is refused per call unless its token
  // is accepted.
  grpc::SslServerCredentialsOptions opts(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = m.ca_pem;
  opts.pem_key_cert_pairs.push_back({m.key_pem, m.cert_pem});
  return grpc::SslServerCredentials(opts);
}

std::shared_ptr<grpc::Channel> MakeSecureChannel(const std::string& target, const TlsMaterial& m,
                                                 const std::string& bearer_token) {
  grpc::ChannelArguments args;
  // Reconnect promptly after a peer restarts (default backoff reaches 120 s).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  if (m.insecure)
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions opts;
  opts.pem_root_certs = m.ca_pem;
  opts.pem_private_key = m.key_pem;
  opts.pem_cert_chain = m.cert_pem;
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::SslCredentials(opts);
  if (!bearer_token.empty()) {
    creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(bearer_token));
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

Authorizer::Authorizer(const TlsMaterial& m, prometheus::Registry* registry,
                       const std::string& prefix)
    : insecure_(m.insecure), token_hashes_(m.admin_token_hashes) {
  if (registry != nullptr) {
    refused_ = &prometheus::BuildCounter()
                    .Name(prefix + "_rpc_refused_total")
                    .Help(
                        "Control-plane calls refused: unauthenticated (no valid certificate "
                        "or token) or permission_denied (the wrong identity or role).")
                    .Register(*registry);
  }
}

Authorizer::Caller Authorizer::Identify(const grpc::ServerContext* ctx) const {
  Caller c;
  if (insecure_) {
    c.role = Role::kAdmin;  // no authentication: everything is allowed
    c.name = "insecure";
    return c;
  }
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr) return c;
  const auto security = auth->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
  if (security.empty() ||
      std::string(security[0].data(), security[0].size()) != GRPC_SSL_TRANSPORT_SECURITY_TYPE) {
    return c;
  }
  if (auth->IsPeerAuthenticated()) {
    const auto pem = auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
    if (!pem.empty()) {
      std::string name;
      Role role = Role::kNone;
      if (CertificateIdentity(std::string(pem[0].data(), pem[0].size()), &name, &role).ok()) {
        c.role = role;
        c.name = name;
        return c;
      }
    }
    return c;
  }
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return c;
  std::string value(it->second.data(), it->second.size());
  absl::string_view v(value);
  if (!absl::ConsumePrefix(&v, "Bearer ") || v.empty() || v.size() > 4096) return c;
  const std::string hash = TokenHash(std::string(v));
  for (const std::string& h : token_hashes_) {
    if (h.size() == hash.size() && CRYPTO_memcmp(h.data(), hash.data(), h.size()) == 0) {
      c.role = Role::kAdmin;
      c.name = "token:" + hash.substr(0, 8);
      return c;
    }
  }
  return c;
}

grpc::Status Authorizer::Refuse(grpc::StatusCode code, const char* method,
                                const std::string& why) const {
  if (refused_ != nullptr) {
    refused_
        ->Add({{"method", method},
               {"reason", code == grpc::StatusCode::UNAUTHENTICATED ? "unauthenticated"
                                                                    : "permission_denied"}})
        .Increment();
  }
  return grpc::Status(code, why);
}

grpc::Status Authorizer::Unauthenticated(const char* method) const {
  return Refuse(grpc::StatusCode::UNAUTHENTICATED, method,
                absl::StrCat(method,
                             ": no client certificate signed by the cluster's CA and no "
                             "accepted bearer token"));
}

grpc::Status Authorizer::RequireAny(const grpc::ServerContext* ctx, const char* method) const {
  if (Identify(ctx).role == Role::kNone) return Unauthenticated(method);
  return grpc::Status::OK;
}

grpc::Status Authorizer::RequireAdmin(const grpc::ServerContext* ctx, const char* method) const {
  const Caller c = Identify(ctx);
  if (c.role == Role::kNone) return Unauthenticated(method);
  if (c.role != Role::kAdmin) {
    return Refuse(grpc::StatusCode::PERMISSION_DENIED, method,
                  absl::StrCat(method, " needs an admin identity; ", EscapeUntrusted(c.name),
                               " is a ", RoleName(c.role)));
  }
  return grpc::Status::OK;
}

grpc::Status Authorizer::RequireNode(const grpc::ServerContext* ctx, const std::string& node_id,
                                     const char* method) const {
  if (insecure_) return grpc::Status::OK;
  const Caller c = Identify(ctx);
  if (c.role == Role::kNone) return Unauthenticated(method);
  if (c.role != Role::kNode || c.name != node_id) {
    return Refuse(grpc::StatusCode::PERMISSION_DENIED, method,
                  absl::StrCat(method, " for node '", EscapeUntrusted(node_id),
                               "' needs that node's certificate; the caller is ", RoleName(c.role),
                               " '", EscapeUntrusted(c.name), "'"));
  }
  return grpc::Status::OK;
}

}  // namespace hetps
