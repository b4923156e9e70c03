// A real Prometheus (Debian's, installed by tools/bootstrap.sh) scrapes a
// live cluster training an adaptive LTP job, loads the alert rules, and
// every Grafana dashboard panel's query and every alert expression is run
// against it: each must return data while the job trains. An alert's
// expression is run with `bool` after each comparison, so it returns its
// series whether or not the alert would fire (when it fires is
// promtool's part: tests/alerts_test.sh).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/job_helpers.h"
#include "tests/testing/cluster.h"
#include "yaml-cpp/yaml.h"

namespace hetps {
namespace testing {
namespace {

constexpr char kPrometheus[] = "/usr/bin/prometheus";

// A port free now on 127.0.0.1 (Prometheus does not report one it picked).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += char(ch);
    } else {
      out += absl::StrCat("%", absl::Hex(ch, absl::kZeroPad2));
    }
  }
  return out;
}

// The expression with `bool` after every comparison operator outside
// label matchers and strings: `a > 0` becomes `a > bool 0`.
std::string WithBool(const std::string& expr) {
  std::string out;
  int braces = 0;
  char quote = 0;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char ch = expr[i];
    out += ch;
    if (quote != 0) {
      if (ch == '\\' && i + 1 < expr.size()) {
        out += expr[++i];
      } else if (ch == quote) {
        quote = 0;
      }
      continue;
    }
    if (ch == '"' || ch == '\'') {
      quote = ch;
    } else if (ch == '{') {
      ++braces;
    } else if (ch == '}') {
      --braces;
    } else if (braces == 0 && (ch == '>' || ch == '<' || ch == '=' || ch == '!')) {
      const char next = i + 1 < expr.size() ? expr[i + 1] : 0;
      const bool two = next == '=';
      if (ch == '!' && !two) continue;
      if (ch == '=' && !two) continue;  // '=' alone is not PromQL outside matchers
      if (two) out += expr[++i];
      out += " bool";
      if (i + 1 < expr.size() && expr[i + 1] != ' ') out += ' ';
    }
  }
  return out;
}

struct Query {
  std::string where;  // dashboard/panel or alert name
  std::string expr;
};

std::vector<Query> DashboardQueries() {
  std::vector<Query> out;
  const std::string dir = Runfile("deploy/grafana");
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".json") continue;
    YAML::Node d = YAML::LoadFile(f.path().string());  // JSON is YAML
    for (const YAML::Node& p : d["panels"]) {
      for (const YAML::Node& t : p["targets"]) {
        out.push_back(
            {absl::StrCat(f.path().filename().string(), ": ", p["title"].as<std::string>()),
             t["expr"].as<std::string>()});
      }
    }
  }
  return out;
}

std::vector<Query> AlertQueries() {
  std::vector<Query> out;
  YAML::Node rules = YAML::LoadFile(Runfile("deploy/prometheus/hetps-alerts.yml"));
  for (const YAML::Node& g : rules["groups"]) {
    for (const YAML::Node& r : g["rules"]) {
      out.push_back(
          {"alert " + r["alert"].as<std::string>(), WithBool(r["expr"].as<std::string>())});
    }
  }
  return out;
}

TEST_CASE("WithBool turns every comparison into a bool one") {
  CHECK(WithBool(R"(schedd_nodes{state="dead"} > 0)") == R"(schedd_nodes{state="dead"} > bool 0)");
  CHECK(WithBool(R"(x{a!="b",c=~"d"} == 0 and y >= 1 or z != 2)") ==
        R"(x{a!="b",c=~"d"} == bool 0 and y >= bool 1 or z != bool 2)");
  CHECK(WithBool("a<0.5*b") == "a< bool 0.5*b");
}

TEST_CASE("Every dashboard panel and alert expression returns data from a live cluster") {
  REQUIRE(access(kPrometheus, X_OK) == 0);  // installed by tools/bootstrap.sh
  std::vector<Query> queries = DashboardQueries();
  const size_t panels = queries.size();
  REQUIRE(panels >= 30);
  for (Query& q : AlertQueries()) queries.push_back(std::move(q));
  REQUIRE(queries.size() > panels);

  LocalCluster c("prometheus");
  // Four hosts: schedd's policy loop has links to measure and plans to make.
  StartHostsCluster(c, {"--report_every=10"});

  std::vector<std::string> targets;
  for (const char* id : {"schedd", "psd-0", "psd-1", "worker-0", "worker-1"}) {
    targets.push_back(absl::StrCat("'", c.node(id).metrics_address, "'"));
  }
  const std::string config = c.dir() + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 250ms\n  evaluation_interval: 250ms\n"
                        << "rule_files: ['" << Runfile("deploy/prometheus/hetps-alerts.yml")
                        << "']\nscrape_configs:\n  - job_name: hetps\n    static_configs:\n"
                        << "      - targets: [" << absl::StrJoin(targets, ", ") << "]\n";
  const std::string prom = absl::StrCat("127.0.0.1:", FreePort());
  absl::StatusOr<Process> p =
      Process::Start({kPrometheus, "--config.file=" + config,
                      "--storage.tsdb.path=" + c.dir() + "/tsdb", "--web.listen-address=" + prom},
                     c.dir(), "prometheus");
  REQUIRE(p.ok());
  INFO("prometheus log: " << p->Stderr());
  REQUIRE(WaitFor([&] { return HttpGet(prom, "/-/ready").ok(); }, absl::Seconds(30)));
  // Every rule loaded.
  absl::StatusOr<std::string> rules = HttpGet(prom, "/api/v1/rules");
  REQUIRE(rules.ok());
  CHECK(rules->find("\"HetpsLinkDegraded\"") != std::string::npos);

  // Long enough to outlast the queries; cancelled once they all answered.
  const std::string job =
      WriteJob(c, "job.yaml",
               "name: observed\nmodel: mlp\niterations: 100000\neval_every: 20\n"
               "chunk_size: 4096\ntransport: ltp\nload_policy: elastic\nupdate_time_s: 1\n"
               "update_rate: 0\nprobe_chunk_num: 2\n");
  ProcessResult sub = c.Psctl({"job", "submit", job, "-o", "json"});
  INFO(sub.stdout_text << sub.stderr_text);
  REQUIRE(sub.exit_code == 0);
  const std::string job_id = c.Job().job_id();
  REQUIRE(!job_id.empty());

  // Each query must return a series at some evaluation while the job
  // trains: those that need the training (rates, plans) answer as it goes.
  std::map<std::string, std::string> pending;  // expr -> where
  for (const Query& q : queries) pending[q.expr] = q.where;
  std::map<std::string, std::string> last_answer;
  WaitFor(
      [&] {
        for (auto it = pending.begin(); it != pending.end();) {
          absl::StatusOr<std::string> r =
              HttpGet(prom, "/api/v1/query?query=" + UrlEncode(it->first));
          const bool data = r.ok() && r->find("\"status\":\"success\"") != std::string::npos &&
                            r->find("\"result\":[]") == std::string::npos;
          last_answer[it->first] = r.ok() ? *r : std::string(r.status().message());
          it = data ? pending.erase(it) : std::next(it);
        }
        return pending.empty();
      },
      absl::Seconds(150));
  ProcessResult cancel = c.Psctl({"job", "cancel", job_id});
  for (const auto& [expr, where] : pending) {
    INFO(where << "\n  " << expr << "\n  last answer: " << last_answer[expr]);
    CHECK(false);
  }
  CHECK(pending.empty());
  INFO(cancel.stdout_text << cancel.stderr_text);
  CHECK(cancel.exit_code == 0);
  v1::JobStatus j;
  CHECK(c.WaitJobEnded(absl::Seconds(60), &j));
  p->Signal(SIGTERM);
  CHECK(p->Wait(absl::Seconds(30)) == 0);
}

}  // namespace
}  // namespace testing
}  // namespace hetps
