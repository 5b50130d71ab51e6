// libmock_cupti_client.so: a CUPTI client loaded through CUDA_INJECTION64_PATH, as
// libgprof_inject.so is, reduced to what shows that the fake driver and the mock libcupti serve
// one. Its InitializeInjection loads libcupti as the injected library does (GPROF_CUPTI_LIB, else
// libcupti.so.13 beside the process's libcudart.so.13), subscribes to every runtime and driver
// callback and collects kernel, memcpy, memset and synchronization records on CLOCK_MONOTONIC.
// At exit it flushes (forced) and writes what it saw to $MOCK_CUPTI_TEST_OUT/<pid>.log, in order:
//   init pid=<pid>                  (each InitializeInjection call in this process)
//   subscribe <result>              (cuptiGetResultString of cuptiSubscribe's result)
//   cupti-missing <path>            (instead, when libcupti cannot be loaded)
//   enter|exit runtime|driver <functionName> cbid=<cbid> corr=<correlationId> tid=<tid>
//   record <CUpti_ActivityKind> corr=<correlationId>
//   dropped <records dropped in the process's context and the global queue>
#include <cupti.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

// The CUPTI functions this client calls, from the libcupti it loaded.
struct CuptiFunctions {
  decltype(&cuptiGetResultString) get_result_string;
  decltype(&cuptiSubscribe) subscribe;
  decltype(&cuptiEnableDomain) enable_domain;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks;
  decltype(&cuptiActivityRegisterTimestampCallback) register_timestamp_callback;
  decltype(&cuptiSetThreadIdType) set_thread_id_type;
  decltype(&cuptiActivityEnable) enable;
  decltype(&cuptiActivityFlushAll) flush_all;
  decltype(&cuptiActivityGetNextRecord) get_next_record;
  decltype(&cuptiActivityGetNumDroppedRecords) get_num_dropped_records;
};
CuptiFunctions cupti;
bool subscribed = false;

constexpr size_t kBufferBytes = 1 << 16;

// Written at exit: never destroyed, and a fresh one in a forked child.
pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
auto* log_lines = new std::vector<std::string>;
CUcontext seen_context = nullptr;

void Log(const std::string& line) {
  pthread_mutex_lock(&log_lock);
  log_lines->push_back(line);
  pthread_mutex_unlock(&log_lock);
}

__attribute__((constructor)) void ForgetTheParentsLogInForkedChildren() {
  pthread_atfork(nullptr, nullptr, [] {
    pthread_mutex_init(&log_lock, nullptr);
    log_lines->clear();
  });
}

uint64_t CUPTIAPI MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  const auto* call = static_cast<const CUpti_CallbackData*>(data);
  char line[256];
  std::snprintf(line, sizeof line, "%s %s %s cbid=%u corr=%u tid=%ld",
                call->callbackSite == CUPTI_API_ENTER ? "enter" : "exit",
                domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "runtime" : "driver", call->functionName,
                cbid, call->correlationId, long(syscall(SYS_gettid)));
  pthread_mutex_lock(&log_lock);
  seen_context = call->context;
  log_lines->push_back(line);
  pthread_mutex_unlock(&log_lock);
}

void CUPTIAPI OnBufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

uint32_t CorrelationId(const CUpti_Activity& record) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return reinterpret_cast<const CUpti_ActivityKernel10&>(record).correlationId;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return reinterpret_cast<const CUpti_ActivityMemcpy6&>(record).correlationId;
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return reinterpret_cast<const CUpti_ActivityMemset4&>(record).correlationId;
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return reinterpret_cast<const CUpti_ActivitySynchronization2&>(record).correlationId;
    default:
      return 0;
  }
}

void CUPTIAPI OnBufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  CUpti_Activity* record = nullptr;
  while (cupti.get_next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    Log("record " + std::to_string(record->kind) +
        " corr=" + std::to_string(CorrelationId(*record)));
  }
  std::free(buffer);
}

void WriteLog() {
  const char* directory = std::getenv("MOCK_CUPTI_TEST_OUT");
  if (directory == nullptr) return;
  if (subscribed) {
    cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    size_t in_context = 0, global = 0;
    cupti.get_num_dropped_records(seen_context, 0, &in_context);
    cupti.get_num_dropped_records(nullptr, 0, &global);
    Log("dropped " + std::to_string(in_context + global));
  }
  const std::string path = std::string(directory) + "/" + std::to_string(getpid()) + ".log";
  FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return;
  pthread_mutex_lock(&log_lock);
  for (const std::string& line : *log_lines) std::fprintf(file, "%s\n", line.c_str());
  pthread_mutex_unlock(&log_lock);
  std::fclose(file);
}

// GPROF_CUPTI_LIB, else libcupti.so.13 in the directory of the loaded libcudart.so.
std::string CuptiPath() {
  if (const char* path = std::getenv("GPROF_CUPTI_LIB"); path != nullptr && *path != '\0') {
    return path;
  }
  std::string directory;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* found) {
        const char* name = info->dlpi_name;
        if (name == nullptr || std::strstr(name, "/libcudart.so") == nullptr) return 0;
        *static_cast<std::string*>(found) = std::string(name, std::strrchr(name, '/'));
        return 1;
      },
      &directory);
  return directory.empty() ? "" : directory + "/libcupti.so.13";
}

template <typename Function>
bool Resolve(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  return function != nullptr;
}

bool LoadCupti(const std::string& path) {
  void* library = path.empty() ? nullptr : dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  return library != nullptr && Resolve(library, "cuptiGetResultString", cupti.get_result_string) &&
         Resolve(library, "cuptiSubscribe", cupti.subscribe) &&
         Resolve(library, "cuptiEnableDomain", cupti.enable_domain) &&
         Resolve(library, "cuptiActivityRegisterCallbacks", cupti.register_callbacks) &&
         Resolve(library, "cuptiActivityRegisterTimestampCallback",
                 cupti.register_timestamp_callback) &&
         Resolve(library, "cuptiSetThreadIdType", cupti.set_thread_id_type) &&
         Resolve(library, "cuptiActivityEnable", cupti.enable) &&
         Resolve(library, "cuptiActivityFlushAll", cupti.flush_all) &&
         Resolve(library, "cuptiActivityGetNextRecord", cupti.get_next_record) &&
         Resolve(library, "cuptiActivityGetNumDroppedRecords", cupti.get_num_dropped_records);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  Log("init pid=" + std::to_string(getpid()));
  // Once: a forked child inherits the registration.
  static const bool exit_handler_registered = std::atexit(WriteLog) == 0;
  (void)exit_handler_registered;
  subscribed = false;
  const std::string path = CuptiPath();
  if (!LoadCupti(path)) {
    Log("cupti-missing " + path);
    return 1;
  }
  CUpti_SubscriberHandle subscriber;
  const CUptiResult result = cupti.subscribe(&subscriber, OnCallback, nullptr);
  const char* result_name = "?";
  cupti.get_result_string(result, &result_name);
  Log(std::string("subscribe ") + result_name);
  if (result != CUPTI_SUCCESS) return 1;  // the program runs on, unobserved
  subscribed = true;
  cupti.enable_domain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
  cupti.enable_domain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  cupti.register_timestamp_callback(MonotonicNs);
  cupti.set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  cupti.register_callbacks(OnBufferRequested, OnBufferCompleted);
  for (const CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION}) {
    cupti.enable(kind);
  }
  return 1;
}
