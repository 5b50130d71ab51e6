#include "bpf/kernel_recorder.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>

#include "bpf/recorder_state.h"
#include "inject/shared/clock.h"
#include "inject/shared/recording_limits.h"

namespace gprof::bpf {

KernelRecorder::KernelRecorder(std::unique_ptr<State> state) : state_(std::move(state)) {}

KernelRecorder::~KernelRecorder() { Finish(); }

Expected<std::unique_ptr<KernelRecorder>> KernelRecorder::Start(
    const std::string& session_dir, const KernelRecorderOptions& options) {
  try {
    return StartOrThrow(session_dir, options);
  } catch (...) {  // bad_alloc from a string or vector: nothing else here throws
    return Status::Error(StatusCode::kOutOfMemory, "kernel recorder: out of memory");
  }
}

void KernelRecorder::SetWindow(uint64_t start_ns, uint64_t end_ns) {
  if (state_->finished) return;
  RecordingWindow window = RecordingWindow::Between(start_ns, end_ns);
  // A window that has ended already (a capture range's close, none opened yet): the programs
  // that only start intervals stop first thing (unshut before the window is set, shut after).
  bool shut = end_ns != 0 && end_ns <= MonotonicNs();
  // The programs read these on every event: plain stores into the mapped data section.
  if (!shut) __atomic_store_n(&state_->skel->data->window_shut, 0, __ATOMIC_RELEASE);
  state_->skel->data->window_start_ns = window.start_ns;
  state_->skel->data->window_length_ns = window.length_ns;
  if (shut) __atomic_store_n(&state_->skel->data->window_shut, 1, __ATOMIC_RELEASE);
}

void KernelRecorder::TrimBefore(uint64_t before_ns) {
  if (state_->writer.trims() && before_ns != 0) state_->writer.TrimBefore(before_ns);
}

bool KernelRecorder::size_budget_stopped() const { return state_->writer.budget_stopped(); }

int KernelRecorder::Poll(int timeout_ms) try {
  State& s = *state_;
  if (s.finished && s.signal_link == nullptr) {
    // Nothing left to drain (Finish ran out of memory and freed it all): the wait still waits,
    // or the caller's loop, which waits here while the command runs, would spin on a CPU.
    poll(nullptr, 0, timeout_ms < 0 ? kPollSliceMs : std::min(timeout_ms, kPollSliceMs));
    return 0;
  }
  // One wait, never longer than a slice: the programs wake us only once a batch is waiting
  // (wakeup_bytes), so a quiet target's records are drained by this timeout, not by a wakeup.
  // Waiting in several slices would lose signals: one that lands between two waits is consumed by
  // the caller's handler and the next wait sleeps on. The caller's loop sees it instead.
  int wait_ms = timeout_ms < 0 ? kPollSliceMs : std::min(timeout_ms, kPollSliceMs);
  // A process just exec'd is looked at again soon: its maps, and for its Python interpreter.
  {
    uint64_t next = std::min(s.NextFollowUpNs(), s.python ? s.python->NextLookNs() : UINT64_MAX);
    uint64_t now = MonotonicNs();
    if (next != UINT64_MAX)
      wait_ms =
          std::min<int>(wait_ms, next <= now ? 0 : static_cast<int>((next - now) / 1000000 + 1));
  }
  int drained = 0;
  int rc = ring_buffer__poll(s.ring, wait_ms);
  if (rc < 0 && rc != -EINTR) return rc;
  if (rc > 0) drained += rc;
  // Whatever epoll did not report: records below the wakeup threshold, or left by an EINTR.
  uint64_t drained_ns = MonotonicNs();
  rc = ring_buffer__consume(s.ring);
  if (rc >= 0) s.signals_drained_ns = drained_ns;
  if (rc < 0) return rc;
  drained += rc;
  if (s.finished) return drained;  // signals only, taken by the caller
  s.SnapshotDueMaps();
  s.FollowUpMaps(MonotonicNs());
  if (s.python) {
    s.python->Tick(MonotonicNs(),
                   [&s](uint32_t pid, std::string* text) { return s.WriteMaps(pid, text, true); });
  }
  if (uint64_t now = MonotonicNs(); now - s.wait_counts_ns >= kWaitCountIntervalNs) {
    s.EmitWaitCounts(now);
  }
  if (MonotonicNs() - s.last_flush_ns >= kFlushIntervalNs) s.Flush();
  return drained;
} catch (...) {  // bad_alloc while staging a loader record
  return -ENOMEM;
}

void KernelRecorder::Finish() {
  State& s = *state_;
  if (s.finished) return;
  s.finished = true;
  try {
    FinishRecording();
  } catch (...) {  // bad_alloc: keep what is staged, close the file, free the kernel objects
    try {
      s.kernel_lost_at_finish = s.KernelLost(nullptr);
    } catch (...) {
    }
    s.Flush();
    s.writer.Close();
    s.Release();
  }
}

const std::vector<std::string>& KernelRecorder::notes() const { return state_->notes; }

bool KernelRecorder::records_signals() const { return state_->signal_link != nullptr; }

uint64_t KernelRecorder::signals_drained_ns() const { return state_->signals_drained_ns; }

std::vector<SignalRecord> KernelRecorder::TakeSignals() {
  std::vector<SignalRecord> taken;
  taken.swap(state_->signals);
  return taken;
}

const std::string& KernelRecorder::last_error() const { return state_->last_error; }

uint64_t KernelRecorder::writes_stopped_ns() const { return state_->writes_stopped_ns; }

const char* KernelRecorder::writes_stopped_cause() const { return state_->stop_cause; }

}  // namespace gprof::bpf
