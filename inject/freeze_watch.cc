#include "inject/freeze_watch.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "inject/capture_range.h"
#include "inject/ring_registry.h"

namespace gprof::inject {
namespace {

// The writer's passes are this far apart at most (its flush interval, and some): a thread that
// blocked right after its last call is seen blocked by then.
constexpr uint64_t kPassNs = 300'000'000;

struct ThreadSchedule {
  bool off_cpu;       // sleeping or in uninterruptible wait
  uint64_t switches;  // voluntary and involuntary: unchanged while it has not run
};

// The number after `key` in `text` (`length` bytes), or false.
bool NumberAfter(const char* text, size_t length, const char* key, uint64_t* value) {
  size_t key_length = strlen(key);
  for (size_t at = 0; at + key_length < length; ++at) {
    if ((at == 0 || text[at - 1] == '\n') && memcmp(text + at, key, key_length) == 0) {
      uint64_t number = 0;
      size_t i = at + key_length;
      while (i < length && (text[i] == ' ' || text[i] == '\t')) ++i;
      size_t digits = 0;
      for (; i < length && text[i] >= '0' && text[i] <= '9' && digits < 19; ++i, ++digits)
        number = number * 10 + static_cast<uint64_t>(text[i] - '0');
      *value = number;
      return digits > 0;
    }
  }
  return false;
}

// /proc's view of thread `tid` of this process; false when it cannot be read (gone).
bool ReadSchedule(uint32_t tid, ThreadSchedule* out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%u/status", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char text[4096];
  size_t length = 0;
  while (length < sizeof(text)) {
    ssize_t got = read(fd, text + length, sizeof(text) - length);
    if (got <= 0) break;
    length += static_cast<size_t>(got);
  }
  close(fd);
  uint64_t voluntary = 0, involuntary = 0;
  const char* state = static_cast<const char*>(memmem(text, length, "\nState:", 7));
  if (state == nullptr || !NumberAfter(text, length, "voluntary_ctxt_switches:", &voluntary) ||
      !NumberAfter(text, length, "nonvoluntary_ctxt_switches:", &involuntary)) {
    return false;
  }
  size_t at = static_cast<size_t>(state - text) + 7;
  while (at < length && (text[at] == ' ' || text[at] == '\t')) ++at;
  out->off_cpu = at < length && (text[at] == 'S' || text[at] == 'D');
  out->switches = voluntary + involuntary;
  return true;
}

bool IsProfilerTid(uint32_t tid) {
  for (uint32_t i = 0, count = ProfilerThreadCount(); i < count; ++i) {
    uint32_t each = 0, role = 0;
    if (ProfilerThreadAt(i, &each, &role) && each == tid) return true;
  }
  return false;
}

}  // namespace

bool FreezeWatch::Frozen(const ThreadRing& ring, Watched& thread, uint64_t freeze_ns,
                         uint64_t now_ns) {
  uint64_t left = ring.call_left_ns.load(std::memory_order_relaxed);
  uint64_t busy_since = ring.busy_since_ns.load(std::memory_order_relaxed);
  bool called =
      left != thread.left_seen_ns || ring.call_entered_ns.load(std::memory_order_relaxed) != 0;
  thread.left_seen_ns = left;
  bool did_cuda_work = busy_since != 0 && left > busy_since && left - busy_since >= freeze_ns;
  ThreadSchedule schedule{};
  if (thread.profiler || called || !did_cuda_work || !ReadSchedule(thread.tid, &schedule) ||
      !schedule.off_cpu) {
    thread.blocked = false;
    return false;
  }
  if (!thread.blocked || schedule.switches != thread.switches) {
    thread.blocked = true;
    thread.blocked_since_ns = now_ns;
    thread.switches = schedule.switches;
  }
  return now_ns - thread.blocked_since_ns >= freeze_ns &&
         thread.blocked_since_ns <= left + freeze_ns + kPassNs;
}

void FreezeWatch::Check(uint64_t now_ns) {
  const CaptureWindowsState* windows = CaptureWindows();
  if (windows == nullptr || windows->flight.freeze_ns == 0 || released_) return;
  if (windows->flight.fired.load(std::memory_order_acquire) != 0) {
    if (fired_here_) WatchRelease(now_ns);
    return;
  }
  uint64_t freeze_ns = windows->flight.freeze_ns;
  uint32_t count = RingCount();
  if (threads_.size() < count) threads_.resize(count);
  std::vector<uint32_t> frozen;
  uint64_t shortest_block_ns = UINT64_MAX;
  for (uint32_t i = 0; i < count; ++i) {
    ThreadRing* ring = RingAt(i);
    Watched& thread = threads_[i];
    if (ring->state.load(std::memory_order_acquire) != RingState::kActive) {
      thread = Watched{};
      continue;
    }
    if (thread.owner_serial != ring->owner_serial) {
      thread = Watched{};
      thread.owner_serial = ring->owner_serial;
      thread.tid = ring->tid;
      thread.profiler = IsProfilerTid(thread.tid);
    }
    uint64_t entered = ring->call_entered_ns.load(std::memory_order_acquire);
    uint32_t api_id = ring->call_api_id.load(std::memory_order_relaxed);
    if (!thread.profiler && entered != 0 && now_ns > entered && now_ns - entered >= freeze_ns) {
      FlightTrigger trigger;
      trigger.cause = CaptureSwitch::kFreezeTrigger;
      trigger.kind = FreezeKind::kCallRunning;
      trigger.pid = static_cast<uint32_t>(getpid());
      trigger.tid = thread.tid;
      trigger.api_id = api_id;
      trigger.at_ns = now_ns;
      trigger.duration_ns = now_ns - entered;
      if (FireFreezeTrigger(trigger)) {
        fired_here_ = true;
        fired_ring_ = i;
        fired_entered_ns_ = entered;
      }
      return;
    }
    if (Frozen(*ring, thread, freeze_ns, now_ns)) {
      frozen.push_back(i);
      if (now_ns - thread.blocked_since_ns < shortest_block_ns)
        shortest_block_ns = now_ns - thread.blocked_since_ns;
    }
  }
  if (frozen.size() < 2) return;
  uint32_t first = frozen[0];
  for (uint32_t i : frozen) {
    if (threads_[i].blocked_since_ns < threads_[first].blocked_since_ns) first = i;
  }
  FlightTrigger trigger;
  trigger.cause = CaptureSwitch::kFreezeTrigger;
  trigger.kind = FreezeKind::kThreadsBlocked;
  trigger.pid = static_cast<uint32_t>(getpid());
  trigger.tid = threads_[first].tid;
  trigger.threads = static_cast<uint32_t>(frozen.size());
  trigger.at_ns = now_ns;
  trigger.duration_ns = shortest_block_ns;
  if (FireFreezeTrigger(trigger)) {
    fired_here_ = true;
    fired_threads_ = frozen;
  }
}

void FreezeWatch::WatchRelease(uint64_t now_ns) {
  bool ran_again = false;
  if (fired_threads_.empty()) {
    ThreadRing* ring = RingAt(fired_ring_);
    ran_again = ring->owner_serial != threads_[fired_ring_].owner_serial ||
                ring->call_entered_ns.load(std::memory_order_acquire) != fired_entered_ns_;
  }
  for (uint32_t i : fired_threads_) {
    ThreadSchedule schedule{};
    ran_again |= !ReadSchedule(threads_[i].tid, &schedule) || !schedule.off_cpu ||
                 schedule.switches != threads_[i].switches;
  }
  if (ran_again) {
    NoteFreezeReleased(now_ns);
    released_ = true;
  }
}

}  // namespace gprof::inject
