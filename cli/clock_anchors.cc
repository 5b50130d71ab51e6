#include "cli/clock_anchors.h"

#include <fcntl.h>
#include <sys/timex.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "inject/shared/clock.h"
#include "inject/shared/namespaces.h"

namespace gprof::cli {
namespace {

constexpr int kAnchorReadings = 8;

int64_t g_boottime_offset_ns = 0;

uint64_t RawNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

std::pair<int64_t, int64_t> TakeOwnTimeNamespaceOffsets() {
  g_time_namespace_offset_ns = ReadTimeNamespaceOffset();
  g_boottime_offset_ns = ReadBoottimeNamespaceOffset();
  return {g_time_namespace_offset_ns, g_boottime_offset_ns};
}

int64_t TestRealtimeSkewNs() {
  const char* text = getenv("GPROF_TEST_REALTIME_SKEW_NS");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  long long skew = strtoll(text, &end, 10);
  return errno == 0 && *end == '\0' ? skew : 0;
}

collector::ClockAnchor ReadClockAnchor() {
  const int64_t skew = TestRealtimeSkewNs();
  collector::ClockAnchor best;
  uint64_t best_width = UINT64_MAX;
  for (int reading = 0; reading < kAnchorReadings; ++reading) {
    uint64_t before = MonotonicNs();
    uint64_t realtime = RawNs(CLOCK_REALTIME);
    uint64_t boottime = RawNs(CLOCK_BOOTTIME) - static_cast<uint64_t>(g_boottime_offset_ns);
    uint64_t after = MonotonicNs();
    if (after < before || after - before >= best_width) continue;
    best_width = after - before;
    best.monotonic_ns = before + best_width / 2;
    best.realtime_ns = realtime + static_cast<uint64_t>(skew);
    best.boottime_ns = boottime;
    best.uncertainty_ns = best_width;
  }
  // What the wall clock itself may be off by, as NTP (through the kernel) bounds it: without it a
  // placement of another host by the anchors would claim the bracket's width, nanoseconds. The
  // test skew stands for an NTP error, so it is within the bound, as a real one would be.
  struct timex ntp {};
  const int state = adjtimex(&ntp);
  const uint64_t max_error_us = state < 0 ? 16'000'000 : static_cast<uint64_t>(ntp.maxerror);
  best.realtime_max_error_ns =
      max_error_us * 1000 + static_cast<uint64_t>(skew < 0 ? -skew : skew);
  return best;
}

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return collector::PrintableName(host);
}

std::string BootId() {
  // Test-only, as the REALTIME skew: sessions of one machine that the merge must align as if
  // they were of different hosts (tests/ranks_test.cc).
  if (const char* test = getenv("GPROF_TEST_BOOT_ID"); test != nullptr && *test != '\0')
    return collector::PrintableName(test);
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char text[64] = {};
  ssize_t n;
  do {
    n = read(fd, text, sizeof(text) - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) return {};
  std::string id(text, static_cast<size_t>(n));
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return collector::PrintableName(id);
}

}  // namespace gprof::cli
