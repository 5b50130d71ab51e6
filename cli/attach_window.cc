#include "cli/attach_window.h"

#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <csignal>
#include <set>

#include "cli/attach_target.h"
#include "inject/shared/clock.h"

namespace gprof::cli {
namespace {

constexpr int kPollIntervalMs = 100;

volatile sig_atomic_t stop_signal = 0;

void NoteStopSignal(int signal) { stop_signal = signal; }

// SIGINT and SIGTERM end the window instead of gprof-run, for as long as this lives; without
// SA_RESTART, so that the recorder's wait returns at once.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction action {};
    action.sa_handler = NoteStopSignal;
    sigemptyset(&action.sa_mask);
    stop_signal = 0;
    sigaction(SIGINT, &action, &previous_[0]);
    sigaction(SIGTERM, &action, &previous_[1]);
  }
  ~StopSignals() {
    sigaction(SIGINT, &previous_[0], nullptr);
    sigaction(SIGTERM, &previous_[1], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction previous_[2]{};
};

}  // namespace

Expected<std::vector<pid_t>> TrackProcessTrees(bpf::KernelRecorder* recorder,
                                               const std::vector<pid_t>& pids) {
  std::set<pid_t> tracked;
  std::vector<pid_t> order;
  // Twice: a process not yet tracked may fork while the others are being tracked.
  for (int pass = 0; pass < 2; ++pass) {
    for (pid_t pid : WithDescendants(pids)) {
      if (tracked.contains(pid)) continue;
      if (Status status = recorder->Track(pid); !status.ok()) {
        if (LiveProcessStart(pid) == 0) continue;  // it ended meanwhile: nothing to follow
        return status;
      }
      tracked.insert(pid);
      order.push_back(pid);
    }
  }
  return order;
}

std::string RecordUntilWindowEnds(bpf::KernelRecorder* recorder, uint64_t end_ns) {
  StopSignals signals;
  const uint64_t end = end_ns != 0 ? end_ns : UINT64_MAX;
  while (true) {
    if (stop_signal != 0) return "signal";
    uint64_t now = MonotonicNs();
    if (now >= end) return "duration";
    if (recorder->size_budget_stopped()) return "max_size";
    if (recorder->RunningProcesses().empty()) return "exited";
    uint64_t wait_ms = std::min<uint64_t>(kPollIntervalMs, (end - now) / 1'000'000 + 1);
    // A failed drain (out of memory) returns at once: the loop still waits, never spins.
    if (recorder->Poll(static_cast<int>(wait_ms)) < 0) poll(nullptr, 0, static_cast<int>(wait_ms));
  }
}

}  // namespace gprof::cli
