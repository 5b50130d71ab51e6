#include "inject/cupti_tracer.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "inject/bounded_queue.h"
#include "inject/capture_range.h"
#include "inject/real_symbol.h"
#include "inject/recorder.h"
#include "inject/shared/clock.h"

namespace gprof::inject {
namespace {

// Activity buffers: a few mapped up front, so that CUPTI's requests (which can come from the
// thread that launches a kernel) are served at once; more on demand, up to a bound, past which
// CUPTI drops records and counts them. Handed around through lock-free queues: a thread of the
// program that asks for a buffer never waits for a lock that the writer or CUPTI's thread holds.
constexpr size_t kActivityBufferBytes = 4u << 20;
constexpr size_t kPreallocatedBuffers = 4;
constexpr size_t kMaxBuffers = 64;
// CUPTI's own worker hands over full buffers this often (partly filled ones come from the writer's
// periodic cuptiActivityFlushAll, session_writer.cc).
constexpr uint32_t kCuptiFlushPeriodMs = 250;
// How long a fatal signal waits for the last flush before it takes its course.
constexpr long kSignalFlushWaitMs = 1500;
constexpr uint32_t kMaxContexts = 64;

struct CaptureState {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  // the status, set a few times per process
  CaptureStatus status{format::CaptureMode::kInterposition, 0,
                       "CUPTI not started: the CUDA driver has not loaded the injection (yet)"};
  std::atomic<bool> status_changed{true};  // the writer takes the lock only when it is set

  CuptiLibrary cupti{};
  std::atomic<bool> cupti_active{false};
  CUpti_SubscriberHandle subscriber = nullptr;
  pid_t started_in = 0;

  BoundedQueue<uint8_t*, kMaxBuffers> free_buffers;  // never full: buffers come from the pool
  std::atomic<size_t> allocated{0};
  BoundedQueue<ActivityBuffer, kMaxBuffers> completed;  // the same
  std::atomic<uint64_t> dropped{0};
  std::atomic<uint64_t> last_buffer_ns{0};

  std::atomic<CUcontext> contexts[kMaxContexts] = {};  // the first null one ends the list

  std::atomic<int> signal_flush{0};
  std::atomic<uint32_t> signal_flush_done{0};
};
constinit CaptureState g;

// Per-thread state of the API callbacks: the outermost call in progress. Nested callbacks (the
// driver calls a runtime call makes) only count depth: the time is the outermost call's, once.
struct ApiCallState {
  uint32_t depth;
  uint32_t api_id;
  uint64_t enter_ns;
  uint64_t correlation_id;
};
__thread ApiCallState t_api_call __attribute__((tls_model("initial-exec")));
__thread CUcontext t_last_context __attribute__((tls_model("initial-exec")));

// The contexts API calls ran in: CUPTI counts dropped GPU records per context, and a context whose
// records found no buffer at all never completes one, so the writer asks each of them. Lock-free:
// a program thread's call never waits for the writer reading the list.
void NoteContext(CUcontext context) {
  if (context == nullptr || context == t_last_context) return;
  t_last_context = context;
  for (std::atomic<CUcontext>& slot : g.contexts) {
    CUcontext seen = slot.load(std::memory_order_acquire);
    if (seen == nullptr && slot.compare_exchange_strong(seen, context, std::memory_order_acq_rel)) {
      return;
    }
    if (seen == context) return;  // known (or just stored by another thread)
  }
}

// A thread that hands over completed buffers outside any CUDA call of its own, and is neither the
// writer nor a thread of the program's (none with a ring of calls, not the main thread), is one of
// CUPTI's: its worker. Buffer requests say nothing: CUPTI makes its first on the thread that
// initialises CUDA (the program's main thread, in cuInit). At exit the flush runs on whichever
// thread exits: not counted then.
void NoteCuptiThread() {
  if (IsProfilerThread() || t_api_call.depth != 0 || t_thread_state.depth != 0 ||
      t_thread_state.ring != nullptr || RecordingShuttingDown() ||
      syscall(SYS_gettid) == getpid()) {
    return;
  }
  NoteProfilerThread(format::ProfilerThreadRole::kCupti);
}

// From malloc, though the allocator's lock is the program's (a 4 MiB block is mmap'ed by glibc,
// briefly under it): a program that registers activity callbacks of its own after ours (Kineto)
// is handed the buffers CUPTI got from us when they complete, and frees them.
uint8_t* MapActivityBuffer() {
  return static_cast<uint8_t*>(aligned_alloc(8, kActivityBufferBytes));
}

// A buffer of the pool, or a new one while the pool is below its bound; nullptr past it.
uint8_t* GetActivityBuffer() {
  uint8_t* data = nullptr;
  if (g.free_buffers.Take(&data, 1) == 1) return data;
  if (g.allocated.fetch_add(1, std::memory_order_relaxed) >= kMaxBuffers) {
    g.allocated.fetch_sub(1, std::memory_order_relaxed);
    return nullptr;
  }
  data = MapActivityBuffer();
  if (data == nullptr) g.allocated.fetch_sub(1, std::memory_order_relaxed);
  return data;
}

void SetStatus(format::CaptureMode mode, uint32_t version, const char* text) {
  pthread_mutex_lock(&g.lock);
  g.status.mode = mode;
  g.status.cupti_version = version;
  snprintf(g.status.text, sizeof(g.status.text), "%s", text);
  g.status_changed.store(true, std::memory_order_release);
  pthread_mutex_unlock(&g.lock);
  NotifyWriter();
}

// cudaProfilerStart/Stop and the driver's cuProfilerStart/Stop (capture_range.h).
bool IsProfilerSwitch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, bool start) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    return cbid == (start ? CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000
                          : CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000);
  }
  return cbid ==
         (start ? CUPTI_DRIVER_TRACE_CBID_cuProfilerStart : CUPTI_DRIVER_TRACE_CBID_cuProfilerStop);
}

void CUPTIAPI OnApiCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (t_thread_state.interposition_recording != 0) return;  // that call is recorded already
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  ApiCallState& state = t_api_call;
  if (call->callbackSite == CUPTI_API_ENTER) {
    if (IsProfilerSwitch(domain, cbid, /*start=*/true)) OnProfilerStart();  // before it is timed
    if (state.depth++ == 0) {
      NoteContext(call->context);
      // Outside every capture window: neither timed nor recorded (0 marks it for the exit).
      state.enter_ns = CaptureClosedNow() ? 0 : MonotonicNs();
      state.api_id =
          format::CuptiApiId(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? format::ApiDomain::kRuntime
                                                                   : format::ApiDomain::kDriver,
                             cbid);
      state.correlation_id = call->correlationId;
      if (state.enter_ns != 0) NoteCallEntered(state.api_id, state.enter_ns);
    }
    return;
  }
  // After the stop is recorded (a nested cuProfilerStop closes nothing open any more).
  struct CloseAfter {
    bool stop;
    ~CloseAfter() {
      if (stop) OnProfilerStop();
    }
  } close_after{IsProfilerSwitch(domain, cbid, /*start=*/false)};
  if (state.depth == 0 || --state.depth != 0) return;  // nested, or an exit seen without its enter
  if (state.enter_ns == 0) return;                       // entered outside every capture window
  uint64_t exit_ns = MonotonicNs();
  NoteCallLeft(exit_ns);
  int saved_errno = errno;
  format::ApiCallRecord record{};
  record.api_id = state.api_id;
  record.enter_ns = state.enter_ns;
  record.exit_ns = exit_ns;
  record.correlation_id = state.correlation_id;
  // cudaError_t and CUresult are both int-sized enums.
  if (call->functionReturnValue != nullptr) {
    record.return_code = *static_cast<const int32_t*>(call->functionReturnValue);
  }
  SubmitCall(record);
  errno = saved_errno;
}

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  uint8_t* data = GetActivityBuffer();
  *buffer = data;
  *size = data != nullptr ? kActivityBufferBytes : 0;  // none: CUPTI drops and counts
  *max_records = 0;
}

void CountDropped(CUcontext context, uint32_t stream_id) {
  // Never with one of our locks held: it re-enters CUPTI (Kineto's deadlock).
  size_t dropped = 0;
  if (g.cupti.ActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS &&
      dropped > 0) {
    g.dropped.fetch_add(dropped, std::memory_order_relaxed);
  }
}

void CUPTIAPI OnBufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t,
                                size_t valid_size) {
  NoteCuptiThread();
  CountDropped(context, stream_id);  // where CUPTI documents to ask
  if (buffer == nullptr) return;
  if (valid_size == 0) {
    ReturnActivityBuffer(buffer);
    return;
  }
  g.completed.Push(ActivityBuffer{buffer, valid_size});
  g.last_buffer_ns.store(MonotonicNs(), std::memory_order_relaxed);
  NotifyWriter();
}

uint64_t CUPTIAPI MonotonicTimestamp() { return MonotonicNs(); }

// Hands CUPTI's last records to the writer: at exit, before the writer's final flush.
void FlushCupti() {
  if (g.cupti_active.load(std::memory_order_acquire)) {
    g.cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
}

// Registered with atexit() once CUDA is initialised: atexit handlers run last-registered first,
// so this runs before the CUDA runtime's own teardown, while CUPTI can still flush.
void FlushAtExit() { ShutdownRecording(); }

// A fatal signal at its default disposition would end the process with CUPTI's last records
// still in its buffers. The handler asks the writer thread to flush (a signal handler itself may
// not call CUPTI), waits a bounded time, then lets the signal take its default course.
void OnFatalSignal(int signal_number) {
  int saved_errno = errno;
  int expected = 0;
  if (g.signal_flush.compare_exchange_strong(expected, signal_number)) {
    NotifyWriter();
    timespec timeout{kSignalFlushWaitMs / 1000, (kSignalFlushWaitMs % 1000) * 1000000L};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g.signal_flush_done),
            FUTEX_WAIT | FUTEX_PRIVATE_FLAG, 0, &timeout, nullptr, 0);
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal_number, &default_action, nullptr);
  errno = saved_errno;
  raise(signal_number);  // pending until this handler returns: then the default action
}

// Only where the program left the default: its own handlers and ignored signals stay its own.
void FlushOnFatalSignals() {
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    struct sigaction current {};
    if (sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO)) {
      continue;
    }
    struct sigaction flush {};
    flush.sa_handler = OnFatalSignal;
    sigemptyset(&flush.sa_mask);
    flush.sa_flags = SA_RESTART;
    sigaction(signal_number, &flush, nullptr);
  }
}

void PreallocateBuffers() {
  while (g.allocated.load(std::memory_order_relaxed) < kPreallocatedBuffers) {
    uint8_t* data = MapActivityBuffer();
    if (data == nullptr) break;
    g.allocated.fetch_add(1, std::memory_order_relaxed);
    g.free_buffers.Push(data);
  }
}

enum class ApiSource {
  kCallbacks,
  kActivity,
  kGpuOnly,
};
struct ApiSourceName {
  ApiSource source;
  const char* name;  // the GPROF_CUPTI_API_RECORDS value
  const char* text;  // for the capture status
};
constexpr ApiSourceName kApiSources[] = {
    {ApiSource::kCallbacks, "callbacks", "API calls from callbacks"},
    {ApiSource::kActivity, "activity", "API calls from activity records"},
    {ApiSource::kGpuOnly, "gpu-only", "GPU work only, no API call recorded"},
};

const ApiSourceName& ChosenApiSource() {
  const char* mode = getenv(kCuptiApiRecordsEnv);
  for (const ApiSourceName& entry : kApiSources) {
    if (mode != nullptr && strcmp(mode, entry.name) == 0) return entry;
  }
  return kApiSources[0];
}

// Subscribes; on failure says why in `reason`. A taken CUPTI names its holder when the CUPTI has
// cuptiSubscribe_v2.
bool Subscribe(char* reason, size_t reason_size) {
  CUptiResult result;
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  if (g.cupti.SubscribeV2 != nullptr) {
    CUpti_SubscriberParams params{};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "gprof-run";
    params.oldSubscriberName = holder;
    params.oldSubscriberSize = sizeof(holder);
    result = g.cupti.SubscribeV2(&g.subscriber, OnApiCallback, nullptr, &params);
  } else {
    result = g.cupti.Subscribe(&g.subscriber, OnApiCallback, nullptr);
  }
  if (result == CUPTI_SUCCESS) return true;
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    snprintf(reason, reason_size,
             "CUPTI is taken by %s: CUDA calls are recorded by interposition, without the GPU "
             "timeline",
             holder[0] != '\0' ? holder : "another tool (Nsight Systems, torch.profiler, ...)");
  } else {
    snprintf(reason, reason_size,
             "cuptiSubscribe failed (%s): CUDA calls are recorded by "
             "interposition",
             g.cupti.ResultText(result));
  }
  return false;
}

// Enables everything gprof-run records. False (with `reason`) when CUPTI refuses a part the
// capture cannot do without; GPU activity kinds a device lacks are only noted.
bool EnableRecording(ApiSource source, char* note, size_t note_size, char* reason,
                     size_t reason_size) {
  CUptiResult result = g.cupti.ActivityRegisterTimestampCallback(MonotonicTimestamp);
  if (result == CUPTI_SUCCESS) {
    result = g.cupti.ActivityRegisterCallbacks(OnBufferRequested, OnBufferCompleted);
  }
  // Kernel tids, not pthread_t, in every record that names a thread (API calls, overheads).
  if (result == CUPTI_SUCCESS) g.cupti.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  if (result == CUPTI_SUCCESS && source == ApiSource::kActivity) {
    result = g.cupti.ActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
    if (result == CUPTI_SUCCESS) result = g.cupti.ActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER);
  } else if (result == CUPTI_SUCCESS && source == ApiSource::kCallbacks) {
    result = g.cupti.EnableDomain(1, g.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    if (result == CUPTI_SUCCESS) {
      result = g.cupti.EnableDomain(1, g.subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
    }
  }
  if (result != CUPTI_SUCCESS) {
    snprintf(reason, reason_size, "CUPTI refused to record API calls (%s)",
             g.cupti.ResultText(result));
    return false;
  }
  note[0] = '\0';
  // The GPUs' UUIDs tell whether two processes' devices are one GPU. CUPTI writes device records
  // when the driver initialises: the dump gets those of a driver initialised before we attached.
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                                  CUPTI_ACTIVITY_KIND_OVERHEAD, CUPTI_ACTIVITY_KIND_DEVICE}) {
    result = kind == CUPTI_ACTIVITY_KIND_DEVICE && g.cupti.ActivityEnableAndDump != nullptr
                 ? g.cupti.ActivityEnableAndDump(kind)
                 : g.cupti.ActivityEnable(kind);
    if (result != CUPTI_SUCCESS) {
      size_t used = strlen(note);
      snprintf(note + used, note_size - used, "; activity kind %d not recorded (%s)",
               static_cast<int>(kind), g.cupti.ResultText(result));
    }
  }
  g.cupti.ActivityFlushPeriod(kCuptiFlushPeriodMs);
  return true;
}

// A forked child has none of the parent's CUPTI session (the driver starts a new one if the child
// uses CUDA), and a lock the parent's CUPTI thread held must not stay held in it.
void ForgetCaptureAfterFork() {
  pthread_mutex_init(&g.lock, nullptr);
  g.cupti_active.store(false, std::memory_order_relaxed);
  g.subscriber = nullptr;
  g.free_buffers.ResetAfterFork();  // the parent's buffers stay the parent's
  g.allocated.store(0, std::memory_order_relaxed);
  g.completed.ResetAfterFork();
  g.dropped.store(0, std::memory_order_relaxed);
  g.last_buffer_ns.store(0, std::memory_order_relaxed);
  for (std::atomic<CUcontext>& slot : g.contexts) slot.store(nullptr, std::memory_order_relaxed);
  g.signal_flush.store(0, std::memory_order_relaxed);
  g.signal_flush_done.store(0, std::memory_order_relaxed);
  g.status = CaptureStatus{format::CaptureMode::kInterposition, 0,
                           "CUPTI not started in this process: the CUDA driver has not loaded the "
                           "injection here"};
  g.status_changed.store(true, std::memory_order_relaxed);
}

// Where CUPTI does not record the calls: interposition does, unless the process has no libcudart.so
// for it to see (`interposable` false), and then nothing records them, which the report says.
// Returns the status's text, for a message.
const char* SetInterpositionStatus(bool interposable, uint32_t version, const char* reason) {
  static char text[sizeof(g.status.text)];  // StartCudaCapture runs once in a process
  if (interposable) {
    snprintf(text, sizeof(text), "%s", reason);
    SetStatus(format::CaptureMode::kInterposition, version, text);
    return text;
  }
  const char* cut = strstr(reason, ": CUDA calls are recorded by interposition");
  int length = static_cast<int>(cut != nullptr ? cut - reason : strlen(reason));
  snprintf(text, sizeof(text),
           "no libcudart.so for interposition to see (a statically linked CUDA runtime, or the "
           "driver API called directly), and CUPTI is not recording: %.*s",
           length, reason);
  SetStatus(format::CaptureMode::kNone, version, text);
  return text;
}

}  // namespace

void StartCudaCapture() {
  pid_t pid = getpid();
  if (g.started_in == pid || !RecordingActive() || !EnsureWriterRunning()) return;
  g.started_in = pid;
  // Inside cuInit, which loads libraries itself: the real runtime functions are looked up here
  // once, not by the program's calls later.
  ResolveRuntimeFunctions();
  const bool interposable = LinkedRuntimeFound();

  const char* mode = getenv(kCudaModeEnv);
  bool required = mode != nullptr && strcmp(mode, "cupti") == 0;
  if (mode != nullptr && strcmp(mode, "preload") == 0) {
    SetInterpositionStatus(interposable, 0,
                           "CUPTI left to other tools (--cuda=preload): no GPU timeline");
    return;
  }
  char reason[512];
  if (!LoadCuptiLibrary(&g.cupti, reason, sizeof(reason))) {
    const char* text = SetInterpositionStatus(interposable, 0, reason);
    if (required) PostMessage(format::MessageLevel::kError, text);
    return;
  }
  if (!Subscribe(reason, sizeof(reason))) {
    const char* text = SetInterpositionStatus(interposable, g.cupti.version, reason);
    // (Where nothing records the calls, the report's LOST line says it already.)
    if (interposable || required) {
      PostMessage(required ? format::MessageLevel::kError : format::MessageLevel::kWarning, text);
    }
    return;
  }
  const ApiSourceName& source = ChosenApiSource();
  char note[256];
  PreallocateBuffers();
  if (!EnableRecording(source.source, note, sizeof(note), reason, sizeof(reason))) {
    g.cupti.Unsubscribe(g.subscriber);
    const char* text = SetInterpositionStatus(interposable, g.cupti.version, reason);
    if (interposable) PostMessage(format::MessageLevel::kWarning, text);
    return;
  }
  g.cupti_active.store(true, std::memory_order_release);
  pthread_atfork(nullptr, nullptr, ForgetCaptureAfterFork);
  // From here the interposed functions only forward: CUPTI records the calls (or, for gpu-only,
  // nothing does).
  SetCuptiRecordsApiCalls(true);
  SetBeforeShutdown(FlushCupti);
  atexit(FlushAtExit);
  FlushOnFatalSignals();

  char text[600];
  snprintf(text, sizeof(text), "%s, %s%s", g.cupti.path, source.text, note);
  SetStatus(format::CaptureMode::kCupti, g.cupti.version, text);
}

bool TakeCaptureStatus(CaptureStatus* out) {
  if (!g.status_changed.load(std::memory_order_acquire)) return false;
  pthread_mutex_lock(&g.lock);
  *out = g.status;
  g.status_changed.store(false, std::memory_order_relaxed);
  pthread_mutex_unlock(&g.lock);
  return true;
}

bool TakeCompletedActivityBuffer(ActivityBuffer* out) { return g.completed.Take(out, 1) == 1; }

void ReturnActivityBuffer(uint8_t* data) {
  g.free_buffers.Push(data);  // every buffer came from this pool: never full
}

uint64_t LastActivityBufferNs() { return g.last_buffer_ns.load(std::memory_order_relaxed); }

uint64_t TakeDroppedActivityRecords() {
  if (ActiveCupti() != nullptr) {
    CountDropped(nullptr, 0);  // the global queue: API records
    for (std::atomic<CUcontext>& slot : g.contexts) {
      CUcontext context = slot.load(std::memory_order_acquire);
      if (context == nullptr) break;
      CountDropped(context, 0);
    }
  }
  return g.dropped.exchange(0, std::memory_order_relaxed);
}

const CuptiLibrary* ActiveCupti() {
  return g.cupti_active.load(std::memory_order_acquire) ? &g.cupti : nullptr;
}

bool CuptiApiName(uint32_t api_id, char* out, size_t size) {
  const CuptiLibrary* cupti = ActiveCupti();
  if (cupti == nullptr) return false;
  auto domain = (api_id >> 16) == static_cast<uint32_t>(format::ApiDomain::kRuntime)
                    ? CUPTI_CB_DOMAIN_RUNTIME_API
                    : CUPTI_CB_DOMAIN_DRIVER_API;
  const char* name = nullptr;
  if (cupti->GetCallbackName(domain, api_id & 0xffff, &name) != CUPTI_SUCCESS || name == nullptr) {
    return false;
  }
  snprintf(out, size, "%s", name);
  // "cudaLaunchKernel_v7000" -> "cudaLaunchKernel": the same name interposition records.
  char* suffix = strrchr(out, '_');
  if (suffix != nullptr && suffix[1] == 'v' && suffix[2] >= '0' && suffix[2] <= '9') *suffix = '\0';
  return true;
}

bool MeasureCuptiClockOffset(int64_t* offset_ns, uint64_t* uncertainty_ns) {
  const CuptiLibrary* cupti = ActiveCupti();
  if (cupti == nullptr) return false;
  bool measured = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    uint64_t before = MonotonicNs();
    uint64_t cupti_now = 0;
    if (cupti->GetTimestamp(&cupti_now) != CUPTI_SUCCESS) return false;
    uint64_t after = MonotonicNs();
    uint64_t half = (after - before) / 2;
    if (!measured || half < *uncertainty_ns) {
      *offset_ns = static_cast<int64_t>(cupti_now - (before + half));
      *uncertainty_ns = half;
      measured = true;
    }
  }
  return measured;
}

bool SignalFlushRequested() { return g.signal_flush.load(std::memory_order_acquire) != 0; }

void FinishSignalFlush() {
  g.signal_flush_done.store(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&g.signal_flush_done),
          FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, nullptr, nullptr, 0);
}

}  // namespace gprof::inject
