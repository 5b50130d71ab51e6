#include "inject/recorder.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "inject/bounded_queue.h"
#include "inject/capture_range.h"
#include "inject/native_stack.h"
#include "inject/nvtx_tool.h"
#include "inject/own_thread.h"
#include "inject/process_limits.h"
#include "inject/python_marker.h"
#include "inject/ring_registry.h"
#include "inject/session_writer.h"
#include "inject/shared/namespaces.h"

namespace gprof::inject {

__thread ThreadState t_thread_state __attribute__((tls_model("initial-exec")));

namespace {

__thread uint32_t t_profiler_role __attribute__((tls_model("initial-exec")));

constexpr uint32_t kMaxProfilerThreads = 16;
// How long exit waits for the writer's last flush before giving up on it.
constexpr int kShutdownWaitMs = 2000;

enum class WriterState : uint32_t { kNotStarted, kRunning, kStopped };

// All of it constant-initialised: valid before any constructor has run.
struct Globals {
  pthread_once_t init_once = PTHREAD_ONCE_INIT;
  std::atomic<bool> active{false};
  // The session directory's path: in session_dir_inline, or mapped where it is longer (a path
  // need not fit PATH_MAX: held_directory.cc opens it a component at a time). nullptr: none.
  const char* session_dir = nullptr;
  char session_dir_inline[PATH_MAX] = {};
  std::atomic<uint64_t> generation{1};  // bumped in every forked child

  pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<ThreadRing*> rings[kMaxRings] = {};
  std::atomic<uint32_t> ring_count{0};
  ThreadRing* free_rings[kMaxRings] = {};  // under registry_lock
  uint32_t free_count = 0;                 // under registry_lock
  std::atomic<uint64_t> unregistered_drops{0};
  pthread_key_t ring_key{};

  std::atomic<WriterState> writer_state{WriterState::kNotStarted};  // under registry_lock to start
  pthread_t writer_thread{};
  pid_t writer_pid = 0;
  std::atomic<uint32_t> wake_word{0};
  uint32_t writer_seen_wake = 0;  // the writer thread's own
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> writer_failure_noted{false};

  // The process's recorded calls, counted where gprof-run reads them after a SIGKILL (the writer's
  // slot of the session's control, CountCallsIn) and here until the writer has one.
  std::atomic<SessionControlState::CallCounter*> shared_calls{nullptr};
  std::atomic<uint64_t> local_calls{0};
  // The session's control as the first call of the process attaches it (under registry_lock,
  // before the writer starts): the process's slot, and so its call count, exists before the
  // writer has run, which a process killed in its first milliseconds may never let it do. The
  // writer adopts the slot (TakeEarlySlot). Inherited by a forked child, which takes a slot of
  // its own.
  alignas(SessionControl) unsigned char early_control_storage[sizeof(SessionControl)] = {};
  SessionControl* early_control = nullptr;
  int early_slot = SessionControl::kClosed;  // none
  bool early_slot_taken = false;

  std::atomic<bool> cupti_records_api_calls{false};
  std::atomic<void (*)()> before_shutdown{nullptr};

  // tid | role << 32 of gprof-run's own threads; 0 while being stored.
  std::atomic<uint64_t> profiler_threads[kMaxProfilerThreads] = {};
  std::atomic<uint32_t> profiler_thread_count{0};

  BoundedQueue<PostedMessage, 16> messages;
  uint64_t stack_threshold_ns = UINT64_MAX;  // from GPROF_STACK_THRESHOLD_NS
  RecordingWindow window;                    // from GPROF_WINDOW_START_NS, GPROF_WINDOW_END_NS
  char budget_handle[64] = {};               // from GPROF_SIZE_BUDGET; empty: no cap
  char control_handle[64] = {};              // from GPROF_SESSION_CONTROL; empty: none
  bool control_unusable = false;             // set, but too long to keep
  FileIdentity session_dir_id;               // from GPROF_SESSION_DIR_ID
  bool has_session_dir_id = false;
};
constinit Globals g;

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op | FUTEX_PRIVATE_FLAG, value,
                 timeout, nullptr, 0);
}

void OnThreadExit(void* value) {
  auto* ring = static_cast<ThreadRing*>(value);
  ThreadState& state = t_thread_state;
  if (ring != nullptr && state.ring == ring &&
      state.generation == g.generation.load(std::memory_order_relaxed)) {
    ring->state.store(RingState::kRetired, std::memory_order_release);
  }
  state.ring = nullptr;
}

// fork() copies only the calling thread. The child must not touch the parent's rings or wait for a
// writer thread it does not have, and a lock another parent thread held must not stay held: start
// over from nothing, leaking the parent's rings (they are the parent's pages, copied on write).
void PrepareFork() { pthread_mutex_lock(&g.registry_lock); }
void ParentAfterFork() { pthread_mutex_unlock(&g.registry_lock); }
void ChildAfterFork() {
  pthread_mutex_init(&g.registry_lock, nullptr);
  g.generation.fetch_add(1, std::memory_order_relaxed);
  g.ring_count.store(0, std::memory_order_relaxed);
  g.free_count = 0;
  g.unregistered_drops.store(0, std::memory_order_relaxed);
  g.shared_calls.store(nullptr, std::memory_order_relaxed);  // the parent's writer's slot
  g.local_calls.store(0, std::memory_order_relaxed);
  g.early_slot = SessionControl::kClosed;  // the parent's
  g.early_slot_taken = false;
  g.writer_state.store(WriterState::kNotStarted, std::memory_order_relaxed);
  g.stop_requested.store(false, std::memory_order_relaxed);
  g.shutting_down.store(false, std::memory_order_relaxed);
  g.writer_failure_noted.store(false, std::memory_order_relaxed);
  g.wake_word.store(0, std::memory_order_relaxed);
  g.writer_seen_wake = 0;
  // The parent's CUPTI session is not the child's: the driver initialises CUDA (and calls
  // InitializeInjection) again if the child uses it, and a flush of the parent's state could hang.
  g.cupti_records_api_calls.store(false, std::memory_order_relaxed);
  g.before_shutdown.store(nullptr, std::memory_order_relaxed);
  // The parent's writer and CUPTI threads are not the child's.
  for (auto& entry : g.profiler_threads) entry.store(0, std::memory_order_relaxed);
  g.profiler_thread_count.store(0, std::memory_order_relaxed);
  t_profiler_role = 0;
  ResetStacksAfterFork();
  g.messages.ResetAfterFork();
  pthread_setspecific(g.ring_key, nullptr);
  t_thread_state.ring = nullptr;
  t_thread_state.registration_failed = 0;
  // A parent that called unshare(CLONE_NEWTIME) (`unshare -T -f`) has its children in the new
  // namespace, with its clock.
  g_time_namespace_offset_ns = ReadTimeNamespaceOffset();
}

// A process that records nothing for a limit tells gprof-run so through the session's control
// (memory, detached again at once), for the report.
void NoteNotRecorded(format::StopCause cause, int error) {
  const char* handle = getenv(kSessionControlEnv);
  SessionControl control;
  if (handle == nullptr || control.Attach(handle) != 0) return;
  char name[64];
  snprintf(name, sizeof(name), "inject-%d.gpr", static_cast<int>(getpid()));
  control.Note(static_cast<uint32_t>(getpid()), name, cause, error, MonotonicNs(), 0);
}

void InitializeOnce() {
  // Before any GPROF_* variable is read: a privileged program's environment is its caller's.
  if (SecureExecution()) return;
  const char* dir = getenv(kSessionDirEnv);
  if (dir == nullptr || dir[0] == '\0') return;
  // Before anything is allocated or mapped (process_limits.h).
  uint64_t limit = 0;
  if (int resource = MemoryLimitInForce(&limit); resource >= 0) {
    NoteNotRecorded(format::StopCause::kMemoryLimit, resource);
    return;
  }
  if (SmallThreadLimit()) {
    NoteNotRecorded(format::StopCause::kThreadLimit, 0);
    return;
  }
  size_t dir_length = strlen(dir);
  char* dir_copy = g.session_dir_inline;
  if (dir_length >= sizeof(g.session_dir_inline)) {
    void* memory = mmap(nullptr, dir_length + 1, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return;
    dir_copy = static_cast<char*>(memory);
  }
  if (pthread_key_create(&g.ring_key, OnThreadExit) != 0) return;
  // An identity that does not read is no identity to check against: nothing is recorded.
  if (const char* id = getenv(kSessionDirIdEnv)) {
    if (!ParseFileIdentity(id, &g.session_dir_id)) return;
    g.has_session_dir_id = true;
  }
  if (pthread_atfork(PrepareFork, ParentAfterFork, ChildAfterFork) != 0) return;
  g_time_namespace_offset_ns = ReadTimeNamespaceOffset();  // before the first timestamp
  memcpy(dir_copy, dir, dir_length + 1);
  g.session_dir = dir_copy;
  if (const char* threshold = getenv(kStackThresholdEnv)) {
    g.stack_threshold_ns = strtoull(threshold, nullptr, 10);
  }
  ConfigureStackCopies(getenv(kStackCopyBytesEnv));
  g.window = RecordingWindow::FromEnvironment();
  if (const char* budget = getenv(kSizeBudgetEnv);
      budget != nullptr && strlen(budget) < sizeof(g.budget_handle)) {
    strcpy(g.budget_handle, budget);
  }
  if (const char* control = getenv(kSessionControlEnv)) {
    if (strlen(control) < sizeof(g.control_handle)) {
      strcpy(g.control_handle, control);
    } else {
      g.control_unusable = true;
    }
  }
  AttachCaptureRange(g.control_unusable ? nullptr : g.control_handle);
  g.active.store(true, std::memory_order_release);
}

// The process's slot in the session's control, taken before its writer starts (see Globals).
void RegisterEarlyLocked() {
  if (g.control_unusable || g.control_handle[0] == '\0') return;
  if (g.early_control == nullptr) {
    auto* control = new (g.early_control_storage) SessionControl;
    if (control->Attach(g.control_handle) != 0) return;  // the writer says why (another IPC ns)
    g.early_control = control;
  }
  g.early_slot = g.early_control->Register(static_cast<uint32_t>(getpid()), 0, OwnPidNamespace());
  g.early_slot_taken = true;
  CountCallsIn(g.early_control->SubmittedCalls(g.early_slot));
}

bool StartWriterLocked() {
  RegisterEarlyLocked();
  int error = StartOwnThread(&g.writer_thread, WriterThreadMain,
                             const_cast<char*>(g.session_dir));
  if (error != 0) {
    if (g.early_slot_taken) {  // no writer to adopt it
      CountCallsIn(nullptr);
      g.early_control->Unregister(g.early_slot);
      g.early_slot_taken = false;
    }
    // RLIMIT_NPROC, most likely: nothing is recorded, and the report says so, once.
    if (!g.writer_failure_noted.exchange(true)) {
      NoteNotRecorded(format::StopCause::kThreadLimit, error);
    }
    return false;
  }
  g.writer_pid = getpid();
  g.writer_state.store(WriterState::kRunning, std::memory_order_release);
  return true;
}

// Under registry_lock: whether the writer runs, starting it when it has not been.
bool WriterRunningLocked() {
  WriterState state = g.writer_state.load(std::memory_order_relaxed);
  if (state == WriterState::kRunning) return true;
  return state == WriterState::kNotStarted && StartWriterLocked();
}

ThreadRing* AllocateRingLocked() {
  uint32_t count = g.ring_count.load(std::memory_order_relaxed);
  if (count >= kMaxRings) return nullptr;
  // Untouched pages cost nothing: a thread that makes ten calls uses one page of its ring.
  void* memory = mmap(nullptr, sizeof(ThreadRing), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  auto* ring = new (memory) ThreadRing;  // default-init: the slots stay untouched
  ring->call_stripe = count % SessionControlState::kCallStripes;
  g.rings[count].store(ring, std::memory_order_relaxed);
  g.ring_count.store(count + 1, std::memory_order_release);
  return ring;
}

// One more call of this process, in the session's count (CountCallsIn) on `stripe`, or here
// until the writer has its slot.
void CountCall(uint32_t stripe) {
  if (SessionControlState::CallCounter* shared = g.shared_calls.load(std::memory_order_relaxed)) {
    shared[stripe].count.fetch_add(1, std::memory_order_relaxed);
  } else {
    g.local_calls.fetch_add(1, std::memory_order_relaxed);
  }
}

ThreadRing* RegisterThread() {
  ThreadState& state = t_thread_state;
  uint64_t generation = g.generation.load(std::memory_order_relaxed);
  if (state.registration_failed != 0 && state.generation == generation) return nullptr;

  pthread_mutex_lock(&g.registry_lock);
  bool writer_ok = WriterRunningLocked();
  ThreadRing* ring = nullptr;
  if (writer_ok) ring = g.free_count > 0 ? g.free_rings[--g.free_count] : AllocateRingLocked();
  if (ring != nullptr) {
    ring->tid = static_cast<uint32_t>(syscall(SYS_gettid));
    ring->owner_serial += 1;
    ring->call_entered_ns.store(0, std::memory_order_relaxed);
    ring->call_left_ns.store(0, std::memory_order_relaxed);
    ring->busy_since_ns.store(0, std::memory_order_relaxed);
    memset(ring->initial_name, 0, sizeof(ring->initial_name));
    prctl(PR_GET_NAME, ring->initial_name);
    ring->state.store(RingState::kActive, std::memory_order_release);
  }
  pthread_mutex_unlock(&g.registry_lock);

  state.generation = generation;
  state.ring = ring;
  state.registration_failed = ring == nullptr;
  if (ring != nullptr) pthread_setspecific(g.ring_key, ring);
  return ring;
}

}  // namespace

bool RecordingActive() {
  pthread_once(&g.init_once, InitializeOnce);
  return g.active.load(std::memory_order_relaxed);
}

bool CuptiRecordsApiCalls() { return g.cupti_records_api_calls.load(std::memory_order_relaxed); }

void SetCuptiRecordsApiCalls(bool enabled) {
  g.cupti_records_api_calls.store(enabled, std::memory_order_relaxed);
}

const char* SessionDirectory() { return RecordingActive() ? g.session_dir : nullptr; }

const FileIdentity* SessionDirectoryId() {
  return g.has_session_dir_id ? &g.session_dir_id : nullptr;
}

const RecordingWindow& Window() { return g.window; }

const char* SizeBudgetHandle() { return g.budget_handle[0] != '\0' ? g.budget_handle : nullptr; }

const char* SessionControlHandle() {
  if (g.control_unusable) return "";
  return g.control_handle[0] != '\0' ? g.control_handle : nullptr;
}

bool EnsureWriterRunning() {
  if (!RecordingActive()) return false;
  pthread_mutex_lock(&g.registry_lock);
  bool running = WriterRunningLocked();
  pthread_mutex_unlock(&g.registry_lock);
  return running;
}

// The calling thread's ring, registered now if it has none yet (the thread's first call).
ThreadRing* CurrentRing() {
  ThreadState& state = t_thread_state;
  if (state.ring != nullptr && state.generation == g.generation.load(std::memory_order_relaxed))
    return state.ring;
  return RegisterThread();
}

void NoteCallEntered(uint32_t api_id, uint64_t enter_ns) {
  uint64_t freeze_ns = FreezeTriggerNs();
  if (freeze_ns == 0 || !g.active.load(std::memory_order_relaxed)) return;
  if (ThreadRing* ring = CurrentRing()) {
    uint64_t left_ns = ring->call_left_ns.load(std::memory_order_relaxed);
    if (left_ns == 0 || enter_ns - left_ns >= freeze_ns)
      ring->busy_since_ns.store(enter_ns, std::memory_order_relaxed);
    ring->call_api_id.store(api_id, std::memory_order_relaxed);
    ring->call_entered_ns.store(enter_ns, std::memory_order_release);
  }
}

void NoteCallLeft(uint64_t exit_ns) {
  if (FreezeTriggerNs() == 0) return;
  ThreadState& state = t_thread_state;
  if (ThreadRing* ring = state.ring;
      ring != nullptr && state.generation == g.generation.load(std::memory_order_relaxed) &&
      ring->call_entered_ns.load(std::memory_order_relaxed) != 0) {
    ring->call_left_ns.store(exit_ns, std::memory_order_relaxed);
    ring->call_entered_ns.store(0, std::memory_order_release);
  }
}

void SubmitCall(format::ApiCallRecord record) {
  if (!g.active.load(std::memory_order_relaxed)) return;  // stopped: CUPTI's callbacks still come
  if (!g.window.Contains(record.enter_ns)) return;
  if (const CaptureWindowsState* capture = CaptureWindows();
      capture != nullptr && !CaptureAdmits(capture, record.enter_ns)) {
    return;
  }
  ThreadRing* ring = CurrentRing();
  if (ring == nullptr) {
    CountCall(0);
    g.unregistered_drops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  CountCall(ring->call_stripe);
  record.header = {sizeof(record), format::kApiCall, 0};
  record.tid = ring->tid;
  if (ring->Push(record)) NotifyWriter();
  OnFlightCall(record);
  if (record.exit_ns - record.enter_ns >= g.stack_threshold_ns) {
    CaptureSlowCallStack(record.tid, record.enter_ns, record.exit_ns);
    gprof_python_stack_point(record.tid, record.enter_ns);
  }
}

void SubmitNvtxEvent(format::NvtxEventRecord record, const char* text) {
  if (!g.active.load(std::memory_order_relaxed)) return;
  if (!g.window.Contains(record.time_ns)) return;
  ThreadRing* ring = CurrentRing();
  if (ring == nullptr) {
    g.unregistered_drops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  record.header = {static_cast<uint32_t>(sizeof(record) + record.text_len), format::kNvtxEvent, 0};
  record.tid = ring->tid;
  if (ring->PushSpanning({{&record, sizeof(record)}, {text, record.text_len}})) NotifyWriter();
}

void SubmitNcclEvent(format::NcclEventRecord record, const char* func, const char* datatype) {
  if (!g.active.load(std::memory_order_relaxed)) return;
  if (!g.window.Contains(record.start_ns)) return;
  ThreadRing* ring = CurrentRing();
  if (ring == nullptr) {
    g.unregistered_drops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  record.func_len = static_cast<uint8_t>(func ? strnlen(func, format::kNcclMaxText) : 0);
  record.datatype_len =
      static_cast<uint8_t>(datatype ? strnlen(datatype, format::kNcclMaxText) : 0);
  record.header = {static_cast<uint32_t>(sizeof(record) + record.func_len + record.datatype_len),
                   format::kNcclEvent, 0};
  if (record.tid == 0) record.tid = ring->tid;
  if (ring->PushSpanning(
          {{&record, sizeof(record)}, {func, record.func_len}, {datatype, record.datatype_len}}))
    NotifyWriter();
}

void NoteProfilerThread(format::ProfilerThreadRole role) {
  if (t_profiler_role != 0) return;
  t_profiler_role = static_cast<uint32_t>(role);
  uint32_t index = g.profiler_thread_count.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxProfilerThreads) return;
  uint64_t tid = static_cast<uint32_t>(syscall(SYS_gettid));
  g.profiler_threads[index].store(tid | uint64_t{t_profiler_role} << 32, std::memory_order_release);
}

bool IsProfilerThread() { return t_profiler_role != 0; }

bool RecordingShuttingDown() { return g.shutting_down.load(std::memory_order_relaxed); }

void NotifyWriter() {
  g.wake_word.fetch_add(1, std::memory_order_release);
  Futex(&g.wake_word, FUTEX_WAKE, 1, nullptr);
}

void PostMessage(format::MessageLevel level, const char* text) {
  PostedMessage message;
  message.level = static_cast<uint32_t>(level);
  snprintf(message.text, sizeof(message.text), "%s", text);
  g.messages.Push(message);  // a full queue drops: sixteen messages say enough
  NotifyWriter();
}

size_t TakePostedMessages(PostedMessage* out, size_t capacity) {
  return g.messages.Take(out, capacity);
}

void SetBeforeShutdown(void (*before_flush)()) {
  g.before_shutdown.store(before_flush, std::memory_order_release);
}

void ShutdownRecording() {
  if (g.writer_state.load(std::memory_order_acquire) != WriterState::kRunning ||
      g.writer_pid != getpid() || g.shutting_down.exchange(true)) {
    return;
  }
  NoteNvtxVariableChanged();
  RunBeforeShutdown();
  g.stop_requested.store(true, std::memory_order_release);
  NotifyWriter();
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += kShutdownWaitMs / 1000;
  // Bounded: exit may run where the writer cannot finish (a signal handler interrupted a thread
  // holding the registry lock); the target's exit must not hang on us.
  if (pthread_timedjoin_np(g.writer_thread, nullptr, &deadline) == 0) {
    g.writer_state.store(WriterState::kStopped, std::memory_order_release);
  }
  g.active.store(false, std::memory_order_relaxed);
}

void ResumeRecordingAfterFailedExec() {
  if (g.session_dir == nullptr || g.writer_pid != getpid() ||
      g.writer_state.load(std::memory_order_acquire) != WriterState::kStopped) {
    return;  // never recorded, or the old writer did not stop in time: stay off
  }
  g.stop_requested.store(false, std::memory_order_relaxed);
  g.shutting_down.store(false, std::memory_order_relaxed);
  g.writer_state.store(WriterState::kNotStarted, std::memory_order_release);
  g.active.store(true, std::memory_order_release);
  EnsureWriterRunning();
}

// --- ring_registry.h, for the writer thread ---

uint32_t RingCount() { return g.ring_count.load(std::memory_order_acquire); }

bool TakeEarlySlot(int* slot) {
  pthread_mutex_lock(&g.registry_lock);
  bool taken = g.early_slot_taken;
  *slot = g.early_slot;
  g.early_slot_taken = false;
  g.early_slot = SessionControl::kClosed;
  pthread_mutex_unlock(&g.registry_lock);
  return taken;
}

void CountCallsIn(SessionControlState::CallCounter* counters) {
  g.shared_calls.store(counters, std::memory_order_relaxed);
  if (counters == nullptr) return;  // the slot is given up: not counted from now on
  // Calls counted here before (or while) the counters were set move over.
  if (uint64_t early = g.local_calls.exchange(0, std::memory_order_relaxed); early > 0) {
    counters[0].count.fetch_add(early, std::memory_order_relaxed);
  }
}

ThreadRing* RingAt(uint32_t index) { return g.rings[index].load(std::memory_order_relaxed); }

void ReleaseRing(ThreadRing* ring) {
  pthread_mutex_lock(&g.registry_lock);
  ring->state.store(RingState::kFree, std::memory_order_release);
  g.free_rings[g.free_count++] = ring;
  pthread_mutex_unlock(&g.registry_lock);
}

uint64_t TakeUnregisteredDrops() {
  return g.unregistered_drops.exchange(0, std::memory_order_relaxed);
}

bool WriterStopRequested() { return g.stop_requested.load(std::memory_order_acquire); }

uint32_t ProfilerThreadCount() {
  uint32_t count = g.profiler_thread_count.load(std::memory_order_relaxed);
  return count < kMaxProfilerThreads ? count : kMaxProfilerThreads;
}

bool ProfilerThreadAt(uint32_t index, uint32_t* tid, uint32_t* role) {
  uint64_t entry = g.profiler_threads[index].load(std::memory_order_acquire);
  if (entry == 0) return false;
  *tid = static_cast<uint32_t>(entry);
  *role = static_cast<uint32_t>(entry >> 32);
  return true;
}

void RunBeforeShutdown() {
  if (auto before_flush = g.before_shutdown.load(std::memory_order_acquire)) before_flush();
}

void StopRecording() { g.active.store(false, std::memory_order_relaxed); }

void WaitForWork(int timeout_ms) {
  // A wake-up that came while the writer was busy must not be lost: compare with the value the
  // writer saw when it last woke, not with the value now (a ring that reached its mark during a
  // pass would otherwise wait out the whole timeout, and overflow).
  uint32_t now = g.wake_word.load(std::memory_order_acquire);
  if (now == g.writer_seen_wake && !WriterStopRequested()) {
    timespec timeout{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    Futex(&g.wake_word, FUTEX_WAIT, now, &timeout);
  }
  g.writer_seen_wake = g.wake_word.load(std::memory_order_acquire);
}

}  // namespace gprof::inject
