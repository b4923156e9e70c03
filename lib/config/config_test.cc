#include "lib/config/config.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace hetps {
namespace {

struct TestConfig {
  std::string listen = "127.0.0.1:7070";
  std::string name = "n";
  int64_t interval_ms = 500;
  double ratio = 0.8;
  bool verbose = false;
  std::string mode = "fast";
};

struct Fixture {
  TestConfig cfg;
  ConfigSchema schema{"testd"};
  Fixture() {
    schema.Address("listen", &cfg.listen, "control address");
    schema.String("name", &cfg.name, "a name");
    schema.Int("interval_ms", &cfg.interval_ms, "interval", 1, 60000);
    schema.Double("ratio", &cfg.ratio, "ratio", 0.0, 1.0);
    schema.Bool("verbose", &cfg.verbose, "verbose");
    schema.Enum("mode", &cfg.mode, "mode", {"fast", "slow"});
  }
};

std::string TempFile(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

absl::StatusOr<CommandLine> Run(Fixture& f, std::vector<std::string> args) {
  std::vector<char*> argv;
  static std::string prog = "testd";
  argv.push_back(&prog[0]);
  for (auto& a : args) argv.push_back(&a[0]);
  return LoadConfiguration(static_cast<int>(argv.size()), argv.data(), &f.schema);
}

TEST_CASE("defaults hold without file or flags") {
  Fixture f;
  auto cl = Run(f, {});
  REQUIRE(cl.ok());
  CHECK(f.cfg.interval_ms == 500);
  for (const auto& e : f.schema.Entries()) CHECK(e.source == ConfigSource::kDefault);
}

TEST_CASE("flag beats file beats default") {
  Fixture f;
  std::string path = TempFile("prec.yaml", "interval_ms: 100\nname: from-file\nratio: 0.5\n");
  auto cl = Run(f, {"--config=" + path, "--interval_ms=200", "--verbose"});
  REQUIRE(cl.ok());
  CHECK(f.cfg.interval_ms == 200);
  CHECK(f.cfg.name == "from-file");
  CHECK(f.cfg.ratio == 0.5);
  CHECK(f.cfg.verbose);
  CHECK(f.cfg.mode == "fast");
  for (const auto& e : f.schema.Entries()) {
    if (e.key == "interval_ms") CHECK(e.source == ConfigSource::kFlag);
    if (e.key == "name") CHECK(e.source == ConfigSource::kFile);
    if (e.key == "mode") CHECK(e.source == ConfigSource::kDefault);
  }
}

TEST_CASE("separate-argument flags and dashes work") {
  Fixture f;
  auto cl = Run(f, {"--interval-ms", "42", "--print-config", "--verbose", "--mode", "slow"});
  REQUIRE(cl.ok());
  CHECK(cl->print_config);
  CHECK(f.cfg.interval_ms == 42);
  CHECK(f.cfg.verbose);
  CHECK(f.cfg.mode == "slow");
}

TEST_CASE("unknown key in a file names the key, file and line") {
  Fixture f;
  std::string path = TempFile("unknown.yaml", "name: x\nbogus_key: 3\n");
  auto cl = Run(f, {"--config", path});
  REQUIRE_FALSE(cl.ok());
  std::string msg(cl.status().message());
  CHECK(msg.find("unknown key 'bogus_key'") != std::string::npos);
  CHECK(msg.find(path + " line 2") != std::string::npos);
  CHECK(f.cfg.name == "n");  // nothing applied from a bad file
}

TEST_CASE("wrong types are rejected with the key named") {
  struct Case {
    std::string yaml;
    std::string want;
  };
  std::vector<Case> cases = {
      {"interval_ms: fast\n", "key 'interval_ms'"},
      {"interval_ms: 0\n", "out of range"},
      {"ratio: 2\n", "out of range"},
      {"verbose: maybe\n", "expected true or false"},
      {"listen: nowhere\n", "expected host:port"},
      {"mode: medium\n", "expected one of fast|slow"},
      {"interval_ms: [1, 2]\n", "got a list or mapping"},
      {"interval_ms:\n", "got nothing"},
      {"- a\n- b\n", "expected a mapping"},
      {"name: [unclosed\n", "YAML syntax error"},
  };
  for (const auto& c : cases) {
    Fixture f;
    INFO(c.yaml);
    REQUIRE_FALSE(f.schema.LoadYamlString(c.yaml, "f.yaml").ok());
    CHECK(std::string(f.schema.LoadYamlString(c.yaml, "f.yaml").message()).find(c.want) !=
          std::string::npos);
  }
}

TEST_CASE("bad flags are rejected") {
  {
    Fixture f;
    auto cl = Run(f, {"--nope=1"});
    REQUIRE_FALSE(cl.ok());
    CHECK(std::string(cl.status().message()).find("unknown flag --nope") != std::string::npos);
  }
  {
    Fixture f;
    auto cl = Run(f, {"--interval_ms=abc"});
    REQUIRE_FALSE(cl.ok());
    CHECK(std::string(cl.status().message()).find("flag --interval_ms") != std::string::npos);
  }
  {
    Fixture f;
    auto cl = Run(f, {"positional"});
    REQUIRE_FALSE(cl.ok());
  }
}

TEST_CASE("missing file is a clear error") {
  Fixture f;
  auto cl = Run(f, {"--config=/nonexistent/hetps.yaml"});
  REQUIRE_FALSE(cl.ok());
  CHECK(std::string(cl.status().message()) ==
        "cannot read config file '/nonexistent/hetps.yaml': No such file or directory");
}

TEST_CASE("DumpYaml round-trips the effective configuration") {
  Fixture f;
  REQUIRE(f.schema.Set("name", "a \"quoted\" name", ConfigSource::kFlag, "flag --name").ok());
  REQUIRE(f.schema.Set("interval_ms", "77", ConfigSource::kFlag, "flag").ok());
  std::string dump = f.schema.DumpYaml();
  CHECK(dump.find("interval_ms: 77  # flag") != std::string::npos);
  Fixture g;
  REQUIRE(g.schema.LoadYamlString(dump, "dump").ok());
  CHECK(g.cfg.name == "a \"quoted\" name");
  CHECK(g.cfg.interval_ms == 77);
  CHECK(g.cfg.listen == "127.0.0.1:7070");
}

TEST_CASE("empty file means defaults") {
  Fixture f;
  CHECK(f.schema.LoadYamlString("", "empty.yaml").ok());
  CHECK(f.schema.LoadYamlString("# only a comment\n", "c.yaml").ok());
  CHECK(f.cfg.interval_ms == 500);
}

}  // namespace
}  // namespace hetps
