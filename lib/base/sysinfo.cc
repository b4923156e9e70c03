#include "lib/base/sysinfo.h"

#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace hetps {

uint32_t UsableCpuCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<uint32_t>(n);
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<uint32_t>(n) : 1;
}

uint64_t PhysicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

namespace {

bool ParseCpu(absl::string_view s, int* cpu) {
  // SimpleAtoi takes signs and spaces; a CPU number is digits only.
  if (s.empty() || s.size() > 4) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(s, cpu) && *cpu < kCpuMax;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view list) {
  if (list.size() > 16 * 1024) return absl::InvalidArgumentError("CPU list too long");
  std::vector<bool> in(kCpuMax, false);
  bool any = false;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    absl::string_view lo = item;
    absl::string_view hi = item;
    const size_t dash = item.find('-');
    if (dash != absl::string_view::npos) {
      lo = item.substr(0, dash);
      hi = item.substr(dash + 1);
    }
    int a = 0;
    int b = 0;
    if (!ParseCpu(lo, &a) || !ParseCpu(hi, &b)) {
      return absl::InvalidArgumentError(absl::StrCat("bad CPU list item \"", item.substr(0, 32),
                                                     "\": want N or N-M with CPUs 0..", kCpuMax - 1,
                                                     ", e.g. 0-3,8"));
    }
    if (a > b) {
      return absl::InvalidArgumentError(absl::StrCat("CPU range ", a, "-", b, " runs backwards"));
    }
    for (int c = a; c <= b; ++c) in[c] = true;
    any = true;
  }
  if (!any) return absl::InvalidArgumentError("empty CPU list");
  std::vector<int> cpus;
  for (int c = 0; c < kCpuMax; ++c) {
    if (in[c]) cpus.push_back(c);
  }
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    absl::StrAppend(&out, cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

absl::Status PinToCpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::InvalidArgumentError("no CPUs to run on");
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return absl::InternalError(absl::StrCat("sched_getaffinity: ", std::strerror(errno)));
  }
  cpu_set_t want;
  CPU_ZERO(&want);
  for (int c : cpus) {
    if (c < 0 || c >= kCpuMax || !CPU_ISSET(c, &allowed)) {
      std::vector<int> have;
      for (int a = 0; a < kCpuMax; ++a) {
        if (CPU_ISSET(a, &allowed)) have.push_back(a);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "CPU ", c, " is not one this process may run on (", FormatCpuList(have), ")"));
    }
    CPU_SET(c, &want);
  }
  if (sched_setaffinity(0, sizeof(want), &want) != 0) {
    return absl::InternalError(absl::StrCat("sched_setaffinity: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace hetps
