#include "tests/testing/process.h"

#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/net_address.h"

namespace hetps {
namespace testing {

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return path;  // run from the workspace root by hand
  return absl::StrCat(srcdir, "/", ws ? ws : "hetps", "/", path);
}

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base ? base : "/tmp", "/", name);
  std::string cmd = absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'");
  (void)std::system(cmd.c_str());
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

namespace {

pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path, int stdin_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    // Child: fresh signal state, own process group.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setpgid(0, 0);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (stdin_fd >= 0) {
      dup2(stdin_fd, 0);
    } else {
      int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, 0);
    }
    dup2(out, 1);
    dup2(err, 2);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

int WaitPid(pid_t pid, absl::Duration timeout, int* signal_out) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status) && signal_out) *signal_out = WTERMSIG(status);
      return -1;
    }
    if (r < 0) return -1;
    if (absl::Now() > deadline) return -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

ProcessResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout,
                         const std::string& stdin_text) {
  static std::atomic<int> runs{0};
  std::string dir = TempDir(absl::StrCat("run_", getpid(), "_", runs++));
  std::string in_path = dir + "/stdin";
  std::ofstream(in_path) << stdin_text;
  int in_fd = open(in_path.c_str(), O_RDONLY);
  ProcessResult result;
  pid_t pid = Spawn(argv, dir + "/stdout", dir + "/stderr", in_fd);
  close(in_fd);
  int code = WaitPid(pid, timeout, &result.signal);
  if (code == -2) {
    kill(pid, SIGKILL);
    WaitPid(pid, absl::Seconds(5), &result.signal);
    code = -1;
  }
  result.exit_code = code;
  result.stdout_text = ReadFile(dir + "/stdout");
  result.stderr_text = ReadFile(dir + "/stderr");
  return result;
}

Process::Process(Process&& o) noexcept { *this = std::move(o); }

Process& Process::operator=(Process&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      WaitPid(pid_, absl::Seconds(5), nullptr);
    }
    pid_ = o.pid_;
    stdout_path_ = std::move(o.stdout_path_);
    stderr_path_ = std::move(o.stderr_path_);
    exit_code_ = o.exit_code_;
    o.pid_ = -1;
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    WaitPid(pid_, absl::Seconds(5), nullptr);
  }
}

absl::StatusOr<Process> Process::Start(const std::vector<std::string>& argv, const std::string& dir,
                                       const std::string& name) {
  Process p;
  p.stdout_path_ = absl::StrCat(dir, "/", name, ".out");
  p.stderr_path_ = absl::StrCat(dir, "/", name, ".err");
  p.pid_ = Spawn(argv, p.stdout_path_, p.stderr_path_, -1);
  if (p.pid_ < 0) return absl::InternalError("fork failed");
  return p;
}

void Process::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

int Process::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return exit_code_;
  int code = WaitPid(pid_, timeout, nullptr);
  if (code == -2) return -1;  // still running
  pid_ = -1;
  exit_code_ = code;
  return code;
}

std::string Process::Stderr() const { return ReadFile(stderr_path_); }

bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (cond()) return true;
    if (absl::Now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string JsonField(const std::string& json, const std::string& key) {
  std::string needle = absl::StrCat("\"", key, "\":\"");
  size_t at = json.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  size_t end = json.find('"', at);
  return end == std::string::npos ? "" : json.substr(at, end - at);
}

absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path) {
  absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok()) return hp.status();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(hp->host.c_str(), std::to_string(hp->port).c_str(), &hints, &res) != 0) {
    return absl::UnavailableError("resolve failed");
  }
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", address, ": ", std::strerror(errno)));
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  (void)!write(fd, req.data(), req.size());
  std::string resp;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, n);
  close(fd);
  size_t body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || body == std::string::npos) {
    return absl::DataLossError("malformed HTTP response");
  }
  std::string status_line = resp.substr(0, resp.find("\r\n"));
  if (status_line.find(" 200 ") == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("HTTP status: ", status_line));
  }
  return resp.substr(body + 4);
}

}  // namespace testing
}  // namespace hetps
