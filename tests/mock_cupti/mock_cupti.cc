// The mock libcupti: CUPTI's callback and activity APIs and the hooks the fake driver feeds them
// through. Rules in mock_cupti.h. Built with CUPTI_LIB, so the real headers export the CUPTI
// functions and everything else stays hidden.
#include "tests/mock_cupti/mock_cupti.h"

#include <cupti.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "tests/mock_cupti/activity_buffers.h"

struct NamedId {
  uint32_t id;
  const char* name;
};

// Generated from the real headers by CMakeLists.txt.
constexpr NamedId kRuntimeCallbackNames[] = {
#include "tests/mock_cupti/runtime_cbid_names.inc"
};
constexpr NamedId kDriverCallbackNames[] = {
#include "tests/mock_cupti/driver_cbid_names.inc"
};
constexpr NamedId kResultNames[] = {
#include "tests/mock_cupti/result_names.inc"
};

// The subscriber behind a CUpti_SubscriberHandle. Read by callbacks on any thread, so every field
// a callback reads is atomic.
struct CUpti_Subscriber_st {
  std::atomic<CUpti_CallbackFunc> callback{nullptr};
  std::atomic<void*> userdata{nullptr};
  std::string name;  // cuptiSubscribe_v2's subscriberName
  std::unique_ptr<std::atomic<bool>[]> enabled[CUPTI_CB_DOMAIN_SIZE];
};

namespace mock_cupti {
namespace {

// The callback ids of each domain: [1, count).
constexpr uint32_t kCallbackIdCount[CUPTI_CB_DOMAIN_SIZE] = {
    0,
    CUPTI_DRIVER_TRACE_CBID_SIZE,
    CUPTI_RUNTIME_TRACE_CBID_SIZE,
    CUPTI_CBID_RESOURCE_SIZE,
    CUPTI_CBID_SYNCHRONIZE_SIZE,
    CUPTI_CBID_NVTX_SIZE,
    CUPTI_CBID_STATE_SIZE,
};

bool ValidDomain(CUpti_CallbackDomain domain) {
  return domain > CUPTI_CB_DOMAIN_INVALID && domain < CUPTI_CB_DOMAIN_SIZE;
}

const char* FindName(const NamedId* begin, const NamedId* end, uint32_t id) {
  const NamedId* found =
      std::find_if(begin, end, [&](const NamedId& entry) { return entry.id == id; });
  return found == end ? nullptr : found->name;
}

uint64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

template <typename T>
std::optional<T> NumberFromEnvironment(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (*end != '\0') return std::nullopt;
  return T(value);
}

// The environment knobs of mock_cupti.h.
struct Knobs {
  bool taken = NumberFromEnvironment<int>("MOCK_CUPTI_TAKEN").value_or(0) != 0;
  std::optional<int64_t> clock_offset_ns =
      NumberFromEnvironment<int64_t>("MOCK_CUPTI_CLOCK_OFFSET_NS");
  std::optional<size_t> max_buffers = NumberFromEnvironment<size_t>("MOCK_CUPTI_MAX_BUFFERS");
  const char* device_uuid = std::getenv("MOCK_CUPTI_DEVICE_UUID");
};

// The device record's UUID: the knob's 32 hex digits, else one made of the process id.
CUuuid DeviceUuid(const char* hex) {
  CUuuid uuid = {};
  if (hex != nullptr && std::strlen(hex) == 2 * sizeof(uuid.bytes)) {
    for (size_t i = 0; i < sizeof(uuid.bytes); ++i) {
      unsigned byte = 0;
      if (std::sscanf(hex + 2 * i, "%2x", &byte) != 1) return DeviceUuid(nullptr);
      uuid.bytes[i] = char(byte);
    }
    return uuid;
  }
  const uint32_t pid = uint32_t(getpid());
  std::memcpy(uuid.bytes, "mock-gpu", 8);
  std::memcpy(uuid.bytes + 8, &pid, sizeof pid);
  return uuid;
}

// Unique in the process, across cuptiFinalize and fork.
std::atomic<uint32_t> last_correlation_id{0};

// CUPTI from its (lazy) initialization to cuptiFinalize. Replaced, never freed: hooks on other
// threads may still be inside the previous one.
class Session {
 public:
  Session() : buffers(knobs.max_buffers) {
    for (uint32_t domain = 1; domain < CUPTI_CB_DOMAIN_SIZE; ++domain) {
      subscriber.enabled[domain] = std::make_unique<std::atomic<bool>[]>(kCallbackIdCount[domain]);
    }
  }

  // The activity clock now.
  uint64_t Now() const {
    if (knobs.clock_offset_ns) return ClockNs(CLOCK_MONOTONIC) + uint64_t(*knobs.clock_offset_ns);
    if (const CUpti_TimestampCallbackFunc callback = timestamp_callback.load()) return callback();
    return ClockNs(CLOCK_REALTIME);
  }

  // What a CLOCK_MONOTONIC time is moved by on the activity clock: the two clocks' difference now,
  // read between two monotonic reads (the modular arithmetic handles a clock behind
  // CLOCK_MONOTONIC). One reading for both ends of a record: two would differ by the reads' jitter
  // and could put a short record's end before its start.
  uint64_t OffsetFromMonotonic() const {
    if (knobs.clock_offset_ns) return uint64_t(*knobs.clock_offset_ns);
    const uint64_t before = ClockNs(CLOCK_MONOTONIC);
    const uint64_t now = Now();
    const uint64_t after = ClockNs(CLOCK_MONOTONIC);
    return now - (before + (after - before) / 2);
  }

  bool IsSubscriber(CUpti_SubscriberHandle handle) const {
    return handle == &subscriber && subscribed.load();
  }

  void EnableDomain(CUpti_CallbackDomain domain, bool enable) {
    for (uint32_t cbid = 1; cbid < kCallbackIdCount[domain]; ++cbid) {
      subscriber.enabled[domain][cbid].store(enable);
    }
  }

  void FireCallback(const MockCuptiApiCall& call, CUpti_ApiCallbackSite site,
                    const void* return_value) {
    if (!subscribed.load(std::memory_order_acquire) || !ValidDomain(call.domain) ||
        call.cbid >= kCallbackIdCount[call.domain] ||
        !subscriber.enabled[call.domain][call.cbid].load(std::memory_order_relaxed)) {
      return;
    }
    const CUpti_CallbackFunc callback = subscriber.callback.load();
    if (callback == nullptr) return;
    CUpti_CallbackData data = {};
    data.callbackSite = site;
    data.functionName = call.function_name;
    data.functionParams = call.params;
    data.functionReturnValue = const_cast<void*>(return_value);  // only at the exit
    data.symbolName = call.symbol_name;
    data.context = call.context;
    data.contextUid = call.context_uid;
    data.correlationData = const_cast<uint64_t*>(&call.correlation_data);
    data.correlationId = call.correlation_id;
    callback(subscriber.userdata.load(), call.domain, call.cbid, &data);
  }

  bool KindEnabled(CUpti_ActivityKind kind) const {
    return kind > CUPTI_ACTIVITY_KIND_INVALID && kind < CUPTI_ACTIVITY_KIND_COUNT &&
           kind_enabled[kind].load(std::memory_order_relaxed);
  }

  uint32_t ThreadId() const {
    return thread_id_type.load() == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM
               ? uint32_t(syscall(SYS_gettid))
               : uint32_t(pthread_self());
  }

  const Knobs knobs;
  CUpti_Subscriber_st subscriber;
  std::atomic<bool> subscribed{false};
  std::atomic<bool> kind_enabled[CUPTI_ACTIVITY_KIND_COUNT] = {};
  std::atomic<CUpti_TimestampCallbackFunc> timestamp_callback{nullptr};
  std::atomic<CUpti_ActivityThreadIdType> thread_id_type{CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT};
  ActivityBuffers buffers;
};

std::atomic<Session*> current_session{nullptr};

// CUPTI initializes lazily, at the first call into it.
Session& CurrentSession() {
  Session* session = current_session.load(std::memory_order_acquire);
  if (session != nullptr) return *session;
  auto* fresh = new Session;
  if (current_session.compare_exchange_strong(session, fresh)) return *fresh;
  delete fresh;  // another thread initialized first
  return *session;
}

// The parent's CUPTI does not carry over: a child that uses CUDA initializes its own.
__attribute__((constructor)) void ForgetSessionInForkedChildren() {
  pthread_atfork(nullptr, nullptr, [] { current_session.store(nullptr); });
}

CUpti_ActivityKind ApiActivityKind(CUpti_CallbackDomain domain) {
  return domain == CUPTI_CB_DOMAIN_RUNTIME_API ? CUPTI_ACTIVITY_KIND_RUNTIME
                                               : CUPTI_ACTIVITY_KIND_DRIVER;
}

bool IsLegacyProfilerKind(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_EVENT:
    case CUPTI_ACTIVITY_KIND_METRIC:
    case CUPTI_ACTIVITY_KIND_SOURCE_LOCATOR:
    case CUPTI_ACTIVITY_KIND_GLOBAL_ACCESS:
    case CUPTI_ACTIVITY_KIND_BRANCH:
    case CUPTI_ACTIVITY_KIND_EVENT_INSTANCE:
    case CUPTI_ACTIVITY_KIND_METRIC_INSTANCE:
    case CUPTI_ACTIVITY_KIND_INSTRUCTION_EXECUTION:
    case CUPTI_ACTIVITY_KIND_SHARED_ACCESS:
    case CUPTI_ACTIVITY_KIND_PC_SAMPLING:
    case CUPTI_ACTIVITY_KIND_PC_SAMPLING_RECORD_INFO:
    case CUPTI_ACTIVITY_KIND_INSTRUCTION_CORRELATION:
      return true;
    default:
      return false;
  }
}

CUptiResult CheckKind(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) {
    return CUPTI_ERROR_INVALID_KIND;
  }
  return IsLegacyProfilerKind(kind) ? CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED : CUPTI_SUCCESS;
}

CUptiResult Subscribe(CUpti_SubscriberHandle* handle, CUpti_CallbackFunc callback, void* userdata,
                      const char* name, char* holder_name, size_t holder_name_size) {
  if (handle == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  Session& session = CurrentSession();
  if (session.knobs.taken || session.subscribed.load()) {
    if (holder_name != nullptr && holder_name_size > 0) {
      const std::string holder = session.knobs.taken ? "CUPTI for MOCK_CUPTI_TAKEN"
                                                     : "CUPTI for " + session.subscriber.name;
      std::snprintf(holder_name, holder_name_size, "%s", holder.c_str());
    }
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  session.subscriber.callback.store(callback);
  session.subscriber.userdata.store(userdata);
  session.subscriber.name = name != nullptr ? name : "";
  session.subscribed.store(true, std::memory_order_release);
  *handle = &session.subscriber;
  return CUPTI_SUCCESS;
}

}  // namespace
}  // namespace mock_cupti

using mock_cupti::CurrentSession;
using mock_cupti::Session;

extern "C" {

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  const char* name = mock_cupti::FindName(std::begin(kResultNames), std::end(kResultNames), result);
  if (str == nullptr || name == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *str = name;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  return mock_cupti::Subscribe(subscriber, callback, userdata, nullptr, nullptr, 0);
}

CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber,
                                       CUpti_CallbackFunc callback, void* userdata,
                                       CUpti_SubscriberParams* pParams) {
  if (pParams == nullptr) {
    return mock_cupti::Subscribe(subscriber, callback, userdata, nullptr, nullptr, 0);
  }
  if (pParams->structSize == 0) return CUPTI_ERROR_INVALID_PARAMETER;
  return mock_cupti::Subscribe(subscriber, callback, userdata, pParams->subscriberName,
                               pParams->oldSubscriberName, pParams->oldSubscriberSize);
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  Session& session = CurrentSession();
  if (!session.IsSubscriber(subscriber)) return CUPTI_ERROR_INVALID_PARAMETER;
  session.subscribed.store(false);
  for (uint32_t domain = 1; domain < CUPTI_CB_DOMAIN_SIZE; ++domain) {
    session.EnableDomain(CUpti_CallbackDomain(domain), false);
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  Session& session = CurrentSession();
  if (!session.IsSubscriber(subscriber) || !mock_cupti::ValidDomain(domain) || cbid == 0 ||
      cbid >= mock_cupti::kCallbackIdCount[domain]) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  session.subscriber.enabled[domain][cbid].store(enable != 0);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain) {
  Session& session = CurrentSession();
  if (!session.IsSubscriber(subscriber) || !mock_cupti::ValidDomain(domain)) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  session.EnableDomain(domain, enable != 0);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber) {
  Session& session = CurrentSession();
  if (!session.IsSubscriber(subscriber)) return CUPTI_ERROR_INVALID_PARAMETER;
  for (uint32_t domain = 1; domain < CUPTI_CB_DOMAIN_SIZE; ++domain) {
    session.EnableDomain(CUpti_CallbackDomain(domain), enable != 0);
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetCallbackState(uint32_t* enable, CUpti_SubscriberHandle subscriber,
                                           CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  Session& session = CurrentSession();
  if (enable == nullptr || !session.IsSubscriber(subscriber) || !mock_cupti::ValidDomain(domain) ||
      cbid == 0 || cbid >= mock_cupti::kCallbackIdCount[domain]) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  *enable = session.subscriber.enabled[domain][cbid].load() ? 1 : 0;
  return CUPTI_SUCCESS;
}

// Names exist for the runtime and driver domains only.
CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid,
                                          const char** name) {
  const char* found = nullptr;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    found = mock_cupti::FindName(std::begin(kRuntimeCallbackNames), std::end(kRuntimeCallbackNames),
                                 cbid);
  } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    found = mock_cupti::FindName(std::begin(kDriverCallbackNames), std::end(kDriverCallbackNames),
                                 cbid);
  }
  if (name == nullptr || found == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *name = found;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI
cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                               CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  if (funcBufferRequested == nullptr || funcBufferCompleted == nullptr) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  CurrentSession().buffers.SetCallbacks(funcBufferRequested, funcBufferCompleted);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI
cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp) {
  if (funcTimestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  CurrentSession().timestamp_callback.store(funcTimestamp);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = CurrentSession().Now();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  const CUptiResult result = mock_cupti::CheckKind(kind);
  if (result == CUPTI_SUCCESS) CurrentSession().kind_enabled[kind].store(true);
  return result;
}

CUptiResult CUPTIAPI cuptiActivityEnableAndDump(CUpti_ActivityKind kind) {
  const CUptiResult result = cuptiActivityEnable(kind);
  Session& session = CurrentSession();
  if (result != CUPTI_SUCCESS || kind != CUPTI_ACTIVITY_KIND_DEVICE) return result;
  if (!session.buffers.HasCallbacks()) return CUPTI_ERROR_UNKNOWN;  // as documented
  CUpti_ActivityDevice5 device = {};
  device.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  device.id = 0;
  device.uuid = mock_cupti::DeviceUuid(session.knobs.device_uuid);
  device.name = "Mock GPU";
  device.isCudaVisible = 1;
  device.computeCapabilityMajor = 9;
  device.numMultiprocessors = 132;
  session.buffers.Append(&device, sizeof device, nullptr);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  const CUptiResult result = mock_cupti::CheckKind(kind);
  if (result == CUPTI_SUCCESS) CurrentSession().kind_enabled[kind].store(false);
  return result;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  Session& session = CurrentSession();
  if (!session.buffers.HasCallbacks()) return CUPTI_ERROR_INVALID_OPERATION;
  session.buffers.Flush((flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t time) {
  CurrentSession().buffers.SetFlushPeriod(time);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes,
                                                CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t offset = 0;
  if (*record != nullptr) {
    const size_t size = mock_cupti::RecordSize((*record)->kind);
    if (size == 0) return CUPTI_ERROR_INVALID_KIND;
    offset = size_t(reinterpret_cast<uint8_t*>(*record) - buffer) + size;
  }
  if (offset >= validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  if (validBufferSizeBytes - offset < sizeof(CUpti_Activity)) return CUPTI_ERROR_INVALID_KIND;
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + offset);
  const size_t size = mock_cupti::RecordSize(next->kind);
  if (size == 0 || validBufferSizeBytes - offset < size) return CUPTI_ERROR_INVALID_KIND;
  *record = next;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t,
                                                       size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = CurrentSession().buffers.TakeDropped(context);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
  if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT &&
      type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) {
    return CUPTI_ERROR_NOT_SUPPORTED;
  }
  CurrentSession().thread_id_type.store(type);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetThreadIdType(CUpti_ActivityThreadIdType* type) {
  if (type == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *type = CurrentSession().thread_id_type.load();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiFinalize(void) {
  Session* previous = mock_cupti::current_session.exchange(new Session);
  if (previous != nullptr) {
    previous->subscribed.store(false);
    previous->buffers.Stop();
  }
  return CUPTI_SUCCESS;
}

void mock_cupti_api_enter(MockCuptiApiCall* call) {
  Session& session = CurrentSession();
  call->correlation_id = ++mock_cupti::last_correlation_id;
  call->correlation_data = 0;
  // Read before the enter callback and after the exit one, so the record spans both.
  call->start_timestamp =
      session.KindEnabled(mock_cupti::ApiActivityKind(call->domain)) ? session.Now() : 0;
  session.FireCallback(*call, CUPTI_API_ENTER, nullptr);
}

void mock_cupti_api_exit(MockCuptiApiCall* call, const void* return_value) {
  Session& session = CurrentSession();
  session.FireCallback(*call, CUPTI_API_EXIT, return_value);
  if (call->start_timestamp == 0) return;
  CUpti_ActivityAPI record = {};
  record.kind = mock_cupti::ApiActivityKind(call->domain);
  record.cbid = call->cbid;
  record.start = call->start_timestamp;
  record.end = session.Now();
  record.processId = uint32_t(getpid());
  record.threadId = session.ThreadId();
  record.correlationId = call->correlation_id;
  std::memcpy(&record.returnValue, return_value, sizeof record.returnValue);  // both 32-bit enums
  session.buffers.Append(&record, sizeof record, nullptr);
}

uint64_t mock_cupti_gpu_activity_queued(const CUpti_Activity* record, CUcontext context) {
  Session& session = CurrentSession();
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      CUpti_ActivityKernel10 kernel;
      std::memcpy(&kernel, record, sizeof kernel);
      if (session.KindEnabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) {
        kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      } else if (session.KindEnabled(CUPTI_ACTIVITY_KIND_KERNEL)) {
        kernel.kind = CUPTI_ACTIVITY_KIND_KERNEL;
      } else {
        return 0;
      }
      return session.buffers.AppendPending(&kernel, sizeof kernel, context);
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const size_t size = mock_cupti::RecordSize(record->kind);
      return session.KindEnabled(record->kind)
                 ? session.buffers.AppendPending(record, size, context)
                 : 0;
    }
    default:
      return 0;
  }
}

void mock_cupti_gpu_activity_completed(uint64_t handle, uint64_t start_ns, uint64_t end_ns) {
  if (handle == 0) return;
  Session& session = CurrentSession();
  const uint64_t offset = session.OffsetFromMonotonic();
  session.buffers.Complete(handle, start_ns + offset, end_ns + offset);
}

void mock_cupti_synchronization(const CUpti_ActivitySynchronization2* record, CUcontext context) {
  Session& session = CurrentSession();
  if (!session.KindEnabled(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) return;
  CUpti_ActivitySynchronization2 converted = *record;
  const uint64_t offset = session.OffsetFromMonotonic();
  converted.start = record->start + offset;
  converted.end = record->end + offset;
  session.buffers.Append(&converted, sizeof converted, context);
}

void mock_cupti_overhead(CUpti_ActivityOverheadKind kind, uint64_t start_ns, uint64_t end_ns,
                         uint32_t correlation_id) {
  Session& session = CurrentSession();
  if (!session.KindEnabled(CUPTI_ACTIVITY_KIND_OVERHEAD)) return;
  CUpti_ActivityOverhead3 record = {};
  record.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
  record.overheadKind = kind;
  record.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  record.objectId.pt.processId = uint32_t(getpid());
  record.objectId.pt.threadId = session.ThreadId();
  const uint64_t offset = session.OffsetFromMonotonic();
  record.start = start_ns + offset;
  record.end = end_ns + offset;
  record.correlationId = correlation_id;
  session.buffers.Append(&record, sizeof record, nullptr);
}

}  // extern "C"
