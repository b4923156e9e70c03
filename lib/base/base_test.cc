#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/clock.h"
#include "lib/base/escape.h"
#include "lib/base/json_writer.h"
#include "lib/base/log.h"
#include "lib/base/net_address.h"
#include "lib/base/status_macros.h"
#include "lib/base/sysinfo.h"
#include "lib/base/trace_log.h"

namespace hetps {
namespace {

TEST_CASE("ParseHostPort accepts v4, names and bracketed v6") {
  auto a = ParseHostPort("127.0.0.1:7070");
  REQUIRE(a.ok());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 7070);
  auto b = ParseHostPort("[::1]:0");
  REQUIRE(b.ok());
  CHECK(b->host == "::1");
  CHECK(b->ToString() == "[::1]:0");
  auto c = ParseHostPort("localhost:65535");
  REQUIRE(c.ok());
  CHECK(c->port == 65535);
}

TEST_CASE("ParseHostPort rejects malformed addresses") {
  for (const char* bad : {"", "127.0.0.1", ":80", "host:", "host:65536", "host:-1", "a:b:c",
                          "[::1]80", "[::1]", "host:80x"}) {
    INFO(bad);
    CHECK_FALSE(ParseHostPort(bad).ok());
  }
}

TEST_CASE("ProbeTcpBind reports a port in use") {
  CHECK(ProbeTcpBind(HostPort{"127.0.0.1", 0}).ok());
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(fd, 1) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  uint16_t port = ntohs(addr.sin_port);
  absl::Status s = ProbeTcpBind(HostPort{"127.0.0.1", port});
  CHECK(s.code() == absl::StatusCode::kAlreadyExists);
  close(fd);
  CHECK(ProbeTcpBind(HostPort{"127.0.0.1", port}).ok());
}

TEST_CASE("JsonWriter emits valid, escaped JSON") {
  JsonWriter w;
  w.BeginObject()
      .Key("a")
      .Int(-3)
      .Key("s")
      .String("q\"\\\n\x01")
      .Key("arr")
      .BeginArray()
      .Uint(1)
      .Bool(true)
      .Null()
      .BeginObject()
      .EndObject()
      .EndArray()
      .Key("d")
      .Double(0.5)
      .EndObject();
  CHECK(w.str() == R"({"a":-3,"s":"q\"\\\n\u0001","arr":[1,true,null,{}],"d":0.5})");
}

TEST_CASE("Logger formats one logfmt line with node and component") {
  std::string line = Logger::Format("T", LogLevel::kWarn, "psd-0", "agent", "register failed",
                                    {{"error", "connection refused"}, {"attempt", 3}});
  CHECK(line ==
        "ts=T level=warn node=psd-0 component=agent event=\"register failed\" "
        "error=\"connection refused\" attempt=3");
  LogLevel level;
  CHECK(ParseLogLevel("debug", &level));
  CHECK(level == LogLevel::kDebug);
  CHECK_FALSE(ParseLogLevel("verbose", &level));
}

TEST_CASE("FakeClock only moves when advanced") {
  FakeClock clock;
  absl::Time t0 = clock.Now();
  CHECK(clock.Now() == t0);
  clock.Advance(absl::Milliseconds(250));
  CHECK(clock.Now() - t0 == absl::Milliseconds(250));
}

absl::StatusOr<int> Half(int v) {
  if (v % 2 != 0) return absl::InvalidArgumentError("odd");
  return v / 2;
}

absl::Status Quarter(int v, int* out) {
  ASSIGN_OR_RETURN(int h, Half(v));
  ASSIGN_OR_RETURN(*out, Half(h));
  RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST_CASE("status macros propagate errors and values") {
  int out = 0;
  CHECK(Quarter(8, &out).ok());
  CHECK(out == 2);
  CHECK(Quarter(6, &out).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a trace log writes whole lines and stops at its size bound", "[base]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/trace_log_test.jsonl";
  auto log = TraceLog::Open(path, 24);
  REQUIRE(log.ok());
  (*log)->Write("{\"t\":1}");    // 7 bytes + newline
  (*log)->Write("{\"t\":22}");   // 8 + 1: 17 in all
  (*log)->Write("{\"t\":333}");  // would pass 24: dropped, not cut
  CHECK((*log)->written() == 17);
  CHECK((*log)->dropped() == 1);
  log->reset();
  std::FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[64] = {0};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  CHECK(std::string(buf, n) == "{\"t\":1}\n{\"t\":22}\n");
  CHECK_FALSE(TraceLog::Open("/nonexistent-dir/x.jsonl", 1 << 20).ok());
}

TEST_CASE("sysinfo reports this machine") {
  CHECK(UsableCpuCores() >= 1);
  CHECK(PhysicalMemoryBytes() > (64u << 20));
  CHECK_FALSE(Hostname().empty());
}

TEST_CASE("CPU lists parse like taskset -c and are refused when malformed", "[base]") {
  auto cpus = ParseCpuList("8,0-3,2,10-11");
  REQUIRE(cpus.ok());
  CHECK(*cpus == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(FormatCpuList(*cpus) == "0-3,8,10-11");
  CHECK(*ParseCpuList("1") == std::vector<int>{1});
  CHECK(ParseCpuList("1023").ok());
  for (const char* bad : {"", ",", "1,", "-1", "1-", "3-1", "1024", "0-1024", "+1", " 1", "1 ", "a",
                          "0x1", "1--2", "99999"}) {
    INFO(bad);
    CHECK_FALSE(ParseCpuList(bad).ok());
  }
  CHECK(ParseCpuList("3-1").status().message() == "CPU range 3-1 runs backwards");
  CHECK(ParseCpuList(std::string(20000, '1')).status().message() == "CPU list too long");
}

TEST_CASE("PinToCpus confines the thread and the threads it starts", "[base]") {
  // In a thread of its own, so the test runner keeps its mask.
  std::thread([] {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
    int first = -1;
    int missing = -1;
    for (int c = 0; c < kCpuMax; ++c) {
      if (CPU_ISSET(c, &allowed) && first < 0) first = c;
      if (!CPU_ISSET(c, &allowed)) missing = c;
    }
    REQUIRE(first >= 0);
    if (missing >= 0) {
      absl::Status s = PinToCpus({missing});
      CHECK(s.code() == absl::StatusCode::kInvalidArgument);
      CHECK(s.message().find("is not one this process may run on") != absl::string_view::npos);
    }
    REQUIRE(PinToCpus({first}).ok());
    CHECK(UsableCpuCores() == 1);
    std::thread([first] {
      cpu_set_t set;
      CPU_ZERO(&set);
      REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
      CHECK(CPU_COUNT(&set) == 1);
      CHECK(CPU_ISSET(first, &set));
    }).join();
  }).join();
}

TEST_CASE("untrusted text: control, bidi and invalid bytes become visible escapes", "[base]") {
  CHECK(EscapeUntrusted("job-7 élan 学习") == "job-7 élan 学习");  // printable UTF-8 kept
  CHECK(EscapeUntrusted("a\x1b[31mred") == "a\\x1B[31mred");       // ANSI colour
  CHECK(EscapeUntrusted("x\ny\tz\r\\") == "x\\ny\\tz\\r\\\\");
  CHECK(EscapeUntrusted("\x7f\x01") == "\\x7F\\x01");
  CHECK(EscapeUntrusted("abc\u202Edcba") == "abc\\u202Edcba");  // right-to-left override
  CHECK(EscapeUntrusted("\u2066\u200B\uFEFF\u0085") == "\\u2066\\u200B\\uFEFF\\u0085");
  CHECK(EscapeUntrusted(std::string("\xC0\xAF", 2)) == "\\xC0\\xAF");           // overlong '/'
  CHECK(EscapeUntrusted(std::string("\xED\xA0\x80", 3)) == "\\xED\\xA0\\x80");  // surrogate
  CHECK(EscapeUntrusted(std::string("\xE2\x82", 2)) == "\\xE2\\x82");           // truncated
  CHECK(EscapeUntrusted(std::string("a\0b", 3)) == "a\\x00b");
}

TEST_CASE("log values from outside cannot break or disguise a line", "[base]") {
  const std::string line =
      Logger::Format("T", LogLevel::kInfo, "n", "c", "e", {{"name", "evil\n\x1b[2Jx\u202E"}});
  CHECK(line.find('\n') == std::string::npos);
  CHECK(line.find('\x1b') == std::string::npos);
  CHECK(line.find("\\u202E") != std::string::npos);
  CHECK(line.find("name=\"evil\\n\\x1B[2Jx\\u202E\"") != std::string::npos);
}

}  // namespace
}  // namespace hetps
