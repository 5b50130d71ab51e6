// The program's NVTX ranges, marks, domains, registered strings and category names, per thread
// with their times (docs/nvtx.md). NVTX_INJECTION64_PATH names this library (cli/run_command.cc):
// each NVTX instance in the process (every library carries its own) calls InitializeInjectionNvtx2
// at its first NVTX call, and this fills that instance's core and core2 tables with the handlers
// below, which record into the calling thread's ring (recorder.h): no lock, no allocation, the
// message copied up to kNvtxMaxText bytes. Domains and registered strings get small ids of this
// process, their names recorded once. A tool the user had named in NVTX_INJECTION64_PATH comes in
// GPROF_NVTX_CHAIN_PATH: it is initialised against shadow tables of ours, and each handler calls
// its function after recording.
#define NVTX_NO_IMPL
#include "inject/nvtx_tool.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "inject/capture_range.h"
#include "inject/process_limits.h"
#include "inject/recorder.h"
#include "nvtx3/nvToolsExt.h"

extern "C" int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

namespace gprof::inject {
namespace {

using format::NvtxEventKind;
using format::NvtxEventRecord;

inline constexpr char kChainEnv[] = "GPROF_NVTX_CHAIN_PATH";
constexpr uint32_t kMaxHandles = 4096;  // domains and registered strings kept for the chained tool

struct Tool {
  pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
  bool chain_tried = false;                                // under init_lock
  NvtxInitializeInjectionNvtxFunc_t chain_init = nullptr;  // under init_lock
  NvtxGetExportTableFunc_t initialising = nullptr;         // the instance being set up; init_lock
  // The chained tool's handlers, as its initialisation left them in our shadow tables.
  std::atomic<NvtxFunctionPointer> chain_core[NVTX_CBID_CORE_SIZE] = {};
  std::atomic<NvtxFunctionPointer> chain_core2[NVTX_CBID_CORE2_SIZE] = {};
  // The chained tool's handle for each of our domain and string ids.
  std::atomic<void*> chain_domain[kMaxHandles] = {};
  std::atomic<void*> chain_string[kMaxHandles] = {};
  // Registered strings that are --capture-range=nvtx:NAME's NAME, by id.
  std::atomic<bool> string_names_capture[kMaxHandles] = {};
  // The start/end range of that name that opened the window now open (0: none).
  std::atomic<uint64_t> capture_range_id{0};
  std::atomic<uint32_t> next_domain{1};
  std::atomic<uint32_t> next_string{1};
  std::atomic<uint64_t> next_range{1};
};
constinit Tool g_tool;

__thread int t_push_depth __attribute__((tls_model("initial-exec")));
// 1 + the push depth at which this thread pushed the range that opened the window; 0: none.
__thread int t_capture_level __attribute__((tls_model("initial-exec")));

// NVTX_INJECTION64_PATH as the process started, to tell at exit whether the program changed it.
constexpr char kNvtxVariable[] = "NVTX_INJECTION64_PATH";
char g_started_variable[PATH_MAX] = {};
bool g_started_with_variable = false;

// A copy into a buffer of ours before main: nothing created, nothing called.
__attribute__((constructor)) void KeepStartingVariable() {
  if (SecureExecution()) return;
  const char* value = getenv(kNvtxVariable);
  if (value == nullptr || strlen(value) >= sizeof(g_started_variable)) return;
  strcpy(g_started_variable, value);
  g_started_with_variable = true;
}

template <typename Function>
Function ChainedCore(int cbid) {
  return reinterpret_cast<Function>(g_tool.chain_core[cbid].load(std::memory_order_acquire));
}
template <typename Function>
Function ChainedCore2(int cbid) {
  return reinterpret_cast<Function>(g_tool.chain_core2[cbid].load(std::memory_order_acquire));
}

uint32_t DomainId(nvtxDomainHandle_t domain) {
  auto id = reinterpret_cast<uintptr_t>(domain);
  return id < g_tool.next_domain.load(std::memory_order_relaxed) ? static_cast<uint32_t>(id) : 0;
}
nvtxDomainHandle_t ChainDomain(nvtxDomainHandle_t domain) {
  uint32_t id = DomainId(domain);
  if (id == 0 || id >= kMaxHandles) return nullptr;
  return static_cast<nvtxDomainHandle_t>(g_tool.chain_domain[id].load(std::memory_order_acquire));
}
uint32_t StringId(nvtxStringHandle_t string) {
  auto id = reinterpret_cast<uintptr_t>(string);
  return id < g_tool.next_string.load(std::memory_order_relaxed) ? static_cast<uint32_t>(id) : 0;
}

uint16_t CopyAscii(const char* text, char* out) {
  if (text == nullptr) return 0;
  size_t length = strnlen(text, format::kNvtxMaxText);
  memcpy(out, text, length);
  return static_cast<uint16_t>(length);
}
uint16_t CopyWide(const wchar_t* text, char* out) {
  if (text == nullptr) return 0;
  uint16_t length = 0;
  for (; length < format::kNvtxMaxText && text[length] != 0; ++length) {
    out[length] = text[length] > 0 && text[length] < 128 ? static_cast<char>(text[length]) : '?';
  }
  return length;
}

// Whether `attributes` (of its own declared size) holds the field that ends at `end`.
bool Holds(const nvtxEventAttributes_t* attributes, size_t end) {
  return attributes != nullptr && attributes->size >= end;
}

// Records one event; returns whether it opens a range named as --capture-range=nvtx:NAME asks
// (whose window it then opens first, so that the range's own push is in it).
bool Record(NvtxEventKind kind, uint32_t domain, uint64_t range_id,
            const nvtxEventAttributes_t* attributes, const char* ascii = nullptr,
            const wchar_t* wide = nullptr, uint32_t category = 0) {
  NvtxEventRecord record{};
  char text[format::kNvtxMaxText];
  record.time_ns = MonotonicNs();
  record.kind = static_cast<uint16_t>(kind);
  record.domain_id = domain;
  record.range_id = range_id;
  record.category = category;
  if (ascii != nullptr) record.text_len = CopyAscii(ascii, text);
  if (wide != nullptr) record.text_len = CopyWide(wide, text);
  if (Holds(attributes, offsetof(nvtxEventAttributes_t, category) + sizeof(uint32_t))) {
    record.category = attributes->category;
  }
  if (Holds(attributes, offsetof(nvtxEventAttributes_t, message) + sizeof(nvtxMessageValue_t))) {
    switch (attributes->messageType) {
      case NVTX_MESSAGE_TYPE_ASCII:
        record.text_len = CopyAscii(attributes->message.ascii, text);
        break;
      case NVTX_MESSAGE_TYPE_UNICODE:
        record.text_len = CopyWide(attributes->message.unicode, text);
        break;
      case NVTX_MESSAGE_TYPE_REGISTERED:
        record.string_id = StringId(attributes->message.registered);
        break;
      default:
        break;
    }
  }
  bool names_capture = false;
  if (kind == NvtxEventKind::kPush || kind == NvtxEventKind::kStart) {
    names_capture = record.text_len != 0 ? IsNvtxCaptureName(text, record.text_len)
                    : record.string_id != 0 && record.string_id < kMaxHandles &&
                        g_tool.string_names_capture[record.string_id].load(
                            std::memory_order_relaxed);
  }
  if (names_capture) OnNvtxCaptureRangeOpened();
  SubmitNvtxEvent(record, text);
  return names_capture;
}

// After a push: remembers the level of the capture range's push, the outermost one.
void NoteCapturePush(bool names_capture, int level) {
  if (names_capture && t_capture_level == 0) t_capture_level = level + 1;
}
// After a pop to `level`: the capture range's pop closes its window.
void NoteCapturePop(int level) {
  if (t_capture_level != 0 && level == t_capture_level - 1) {
    t_capture_level = 0;
    OnNvtxCaptureRangeClosed();
  }
}
void NoteCaptureStart(bool names_capture, uint64_t id) {
  uint64_t none = 0;
  if (names_capture) g_tool.capture_range_id.compare_exchange_strong(none, id);
}
void NoteCaptureEnd(uint64_t id) {
  uint64_t expected = id;
  if (id != 0 && g_tool.capture_range_id.compare_exchange_strong(expected, 0))
    OnNvtxCaptureRangeClosed();
}

// The attributes as the chained tool knows them: its own handle for a registered message.
nvtxEventAttributes_t ForChain(const nvtxEventAttributes_t* attributes) {
  nvtxEventAttributes_t copy{};
  if (attributes == nullptr) return copy;
  memcpy(&copy, attributes, attributes->size < sizeof(copy) ? attributes->size : sizeof(copy));
  if (Holds(attributes, offsetof(nvtxEventAttributes_t, message) + sizeof(nvtxMessageValue_t)) &&
      attributes->messageType == NVTX_MESSAGE_TYPE_REGISTERED) {
    uint32_t id = StringId(attributes->message.registered);
    copy.message.registered = id != 0 && id < kMaxHandles
                                  ? static_cast<nvtxStringHandle_t>(
                                        g_tool.chain_string[id].load(std::memory_order_acquire))
                                  : nullptr;
  }
  return copy;
}

int PushLevel() { return t_push_depth++; }
int PopLevel() { return t_push_depth > 0 ? --t_push_depth : -1; }

// --- core ---

void MarkEx(const nvtxEventAttributes_t* attributes) {
  Record(NvtxEventKind::kMark, 0, 0, attributes);
  if (auto chained = ChainedCore<nvtxMarkEx_impl_fntype>(NVTX_CBID_CORE_MarkEx)) {
    nvtxEventAttributes_t copy = ForChain(attributes);
    chained(attributes ? &copy : nullptr);
  }
}
void MarkA(const char* message) {
  Record(NvtxEventKind::kMark, 0, 0, nullptr, message);
  if (auto chained = ChainedCore<nvtxMarkA_impl_fntype>(NVTX_CBID_CORE_MarkA)) chained(message);
}
void MarkW(const wchar_t* message) {
  Record(NvtxEventKind::kMark, 0, 0, nullptr, nullptr, message);
  if (auto chained = ChainedCore<nvtxMarkW_impl_fntype>(NVTX_CBID_CORE_MarkW)) chained(message);
}

// A start/end range's id: the chained tool's where there is one (its End must see its own ids),
// else ours.
uint64_t RangeId(uint64_t chained_id) {
  return chained_id != 0 ? chained_id : g_tool.next_range.fetch_add(1, std::memory_order_relaxed);
}
nvtxRangeId_t RangeStartEx(const nvtxEventAttributes_t* attributes) {
  auto chained = ChainedCore<nvtxRangeStartEx_impl_fntype>(NVTX_CBID_CORE_RangeStartEx);
  nvtxEventAttributes_t copy = ForChain(attributes);
  uint64_t id = RangeId(chained ? chained(attributes ? &copy : nullptr) : 0);
  NoteCaptureStart(Record(NvtxEventKind::kStart, 0, id, attributes), id);
  return id;
}
nvtxRangeId_t RangeStartA(const char* message) {
  auto chained = ChainedCore<nvtxRangeStartA_impl_fntype>(NVTX_CBID_CORE_RangeStartA);
  uint64_t id = RangeId(chained ? chained(message) : 0);
  NoteCaptureStart(Record(NvtxEventKind::kStart, 0, id, nullptr, message), id);
  return id;
}
nvtxRangeId_t RangeStartW(const wchar_t* message) {
  auto chained = ChainedCore<nvtxRangeStartW_impl_fntype>(NVTX_CBID_CORE_RangeStartW);
  uint64_t id = RangeId(chained ? chained(message) : 0);
  NoteCaptureStart(Record(NvtxEventKind::kStart, 0, id, nullptr, nullptr, message), id);
  return id;
}
void RangeEnd(nvtxRangeId_t id) {
  Record(NvtxEventKind::kEnd, 0, id, nullptr);
  NoteCaptureEnd(id);
  if (auto chained = ChainedCore<nvtxRangeEnd_impl_fntype>(NVTX_CBID_CORE_RangeEnd)) chained(id);
}
int RangePushEx(const nvtxEventAttributes_t* attributes) {
  bool names_capture = Record(NvtxEventKind::kPush, 0, 0, attributes);
  int level = PushLevel();
  NoteCapturePush(names_capture, level);
  auto chained = ChainedCore<nvtxRangePushEx_impl_fntype>(NVTX_CBID_CORE_RangePushEx);
  if (!chained) return level;
  nvtxEventAttributes_t copy = ForChain(attributes);
  return chained(attributes ? &copy : nullptr);
}
int RangePushA(const char* message) {
  bool names_capture = Record(NvtxEventKind::kPush, 0, 0, nullptr, message);
  int level = PushLevel();
  NoteCapturePush(names_capture, level);
  auto chained = ChainedCore<nvtxRangePushA_impl_fntype>(NVTX_CBID_CORE_RangePushA);
  return chained ? chained(message) : level;
}
int RangePushW(const wchar_t* message) {
  bool names_capture = Record(NvtxEventKind::kPush, 0, 0, nullptr, nullptr, message);
  int level = PushLevel();
  NoteCapturePush(names_capture, level);
  auto chained = ChainedCore<nvtxRangePushW_impl_fntype>(NVTX_CBID_CORE_RangePushW);
  return chained ? chained(message) : level;
}
int RangePop() {
  Record(NvtxEventKind::kPop, 0, 0, nullptr);
  int level = PopLevel();
  NoteCapturePop(level);
  auto chained = ChainedCore<nvtxRangePop_impl_fntype>(NVTX_CBID_CORE_RangePop);
  return chained ? chained() : level;
}
void NameCategoryA(uint32_t category, const char* name) {
  Record(NvtxEventKind::kNameCategory, 0, 0, nullptr, name, nullptr, category);
  auto chained = ChainedCore<nvtxNameCategoryA_impl_fntype>(NVTX_CBID_CORE_NameCategoryA);
  if (chained) chained(category, name);
}
void NameCategoryW(uint32_t category, const wchar_t* name) {
  Record(NvtxEventKind::kNameCategory, 0, 0, nullptr, nullptr, name, category);
  auto chained = ChainedCore<nvtxNameCategoryW_impl_fntype>(NVTX_CBID_CORE_NameCategoryW);
  if (chained) chained(category, name);
}
void NameOsThreadA(uint32_t thread, const char* name) {
  Record(NvtxEventKind::kNameThread, 0, 0, nullptr, name, nullptr, thread);
  auto chained = ChainedCore<nvtxNameOsThreadA_impl_fntype>(NVTX_CBID_CORE_NameOsThreadA);
  if (chained) chained(thread, name);
}
void NameOsThreadW(uint32_t thread, const wchar_t* name) {
  Record(NvtxEventKind::kNameThread, 0, 0, nullptr, nullptr, name, thread);
  auto chained = ChainedCore<nvtxNameOsThreadW_impl_fntype>(NVTX_CBID_CORE_NameOsThreadW);
  if (chained) chained(thread, name);
}

// --- core2: domains ---

void DomainMarkEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  Record(NvtxEventKind::kMark, DomainId(domain), 0, attributes);
  auto chained = ChainedCore2<nvtxDomainMarkEx_impl_fntype>(NVTX_CBID_CORE2_DomainMarkEx);
  if (!chained) return;
  nvtxEventAttributes_t copy = ForChain(attributes);
  chained(ChainDomain(domain), attributes ? &copy : nullptr);
}
nvtxRangeId_t DomainRangeStartEx(nvtxDomainHandle_t domain,
                                 const nvtxEventAttributes_t* attributes) {
  auto chained =
      ChainedCore2<nvtxDomainRangeStartEx_impl_fntype>(NVTX_CBID_CORE2_DomainRangeStartEx);
  uint64_t chained_id = 0;
  if (chained) {
    nvtxEventAttributes_t copy = ForChain(attributes);
    chained_id = chained(ChainDomain(domain), attributes ? &copy : nullptr);
  }
  uint64_t id = RangeId(chained_id);
  NoteCaptureStart(Record(NvtxEventKind::kStart, DomainId(domain), id, attributes), id);
  return id;
}
void DomainRangeEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id) {
  Record(NvtxEventKind::kEnd, DomainId(domain), id, nullptr);
  NoteCaptureEnd(id);
  auto chained = ChainedCore2<nvtxDomainRangeEnd_impl_fntype>(NVTX_CBID_CORE2_DomainRangeEnd);
  if (chained) chained(ChainDomain(domain), id);
}
int DomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  bool names_capture = Record(NvtxEventKind::kPush, DomainId(domain), 0, attributes);
  int level = PushLevel();
  NoteCapturePush(names_capture, level);
  auto chained = ChainedCore2<nvtxDomainRangePushEx_impl_fntype>(NVTX_CBID_CORE2_DomainRangePushEx);
  if (!chained) return level;
  nvtxEventAttributes_t copy = ForChain(attributes);
  return chained(ChainDomain(domain), attributes ? &copy : nullptr);
}
int DomainRangePop(nvtxDomainHandle_t domain) {
  Record(NvtxEventKind::kPop, DomainId(domain), 0, nullptr);
  int level = PopLevel();
  NoteCapturePop(level);
  auto chained = ChainedCore2<nvtxDomainRangePop_impl_fntype>(NVTX_CBID_CORE2_DomainRangePop);
  return chained ? chained(ChainDomain(domain)) : level;
}
nvtxResourceHandle_t DomainResourceCreate(nvtxDomainHandle_t domain,
                                          nvtxResourceAttributes_t* attributes) {
  auto chained =
      ChainedCore2<nvtxDomainResourceCreate_impl_fntype>(NVTX_CBID_CORE2_DomainResourceCreate);
  return chained ? chained(ChainDomain(domain), attributes) : nullptr;
}
void DomainResourceDestroy(nvtxResourceHandle_t resource) {
  auto chained =
      ChainedCore2<nvtxDomainResourceDestroy_impl_fntype>(NVTX_CBID_CORE2_DomainResourceDestroy);
  if (chained) chained(resource);
}
void DomainNameCategoryA(nvtxDomainHandle_t domain, uint32_t category, const char* name) {
  Record(NvtxEventKind::kNameCategory, DomainId(domain), 0, nullptr, name, nullptr, category);
  auto chained =
      ChainedCore2<nvtxDomainNameCategoryA_impl_fntype>(NVTX_CBID_CORE2_DomainNameCategoryA);
  if (chained) chained(ChainDomain(domain), category, name);
}
void DomainNameCategoryW(nvtxDomainHandle_t domain, uint32_t category, const wchar_t* name) {
  Record(NvtxEventKind::kNameCategory, DomainId(domain), 0, nullptr, nullptr, name, category);
  auto chained =
      ChainedCore2<nvtxDomainNameCategoryW_impl_fntype>(NVTX_CBID_CORE2_DomainNameCategoryW);
  if (chained) chained(ChainDomain(domain), category, name);
}

// A new id from `next`, its name recorded once: the events that use it carry the id only.
uint32_t Register(std::atomic<uint32_t>& next, NvtxEventKind kind, uint32_t domain,
                  const char* ascii, const wchar_t* wide) {
  uint32_t id = next.fetch_add(1, std::memory_order_relaxed);
  NvtxEventRecord record{};
  char text[format::kNvtxMaxText];
  record.time_ns = MonotonicNs();
  record.kind = static_cast<uint16_t>(kind);
  record.domain_id = kind == NvtxEventKind::kDomainCreate ? id : domain;
  record.string_id = kind == NvtxEventKind::kRegisterString ? id : 0;
  record.text_len = ascii != nullptr ? CopyAscii(ascii, text) : CopyWide(wide, text);
  if (kind == NvtxEventKind::kRegisterString && id < kMaxHandles &&
      IsNvtxCaptureName(text, record.text_len)) {
    g_tool.string_names_capture[id].store(true, std::memory_order_relaxed);
  }
  SubmitNvtxEvent(record, text);
  return id;
}

void KeepChainHandle(std::atomic<void*>* handles, uint32_t id, const void* handle) {
  if (id < kMaxHandles) handles[id].store(const_cast<void*>(handle), std::memory_order_release);
}

nvtxStringHandle_t DomainRegisterStringA(nvtxDomainHandle_t domain, const char* string) {
  uint32_t id = Register(g_tool.next_string, NvtxEventKind::kRegisterString, DomainId(domain),
                         string, nullptr);
  auto chained =
      ChainedCore2<nvtxDomainRegisterStringA_impl_fntype>(NVTX_CBID_CORE2_DomainRegisterStringA);
  if (chained) KeepChainHandle(g_tool.chain_string, id, chained(ChainDomain(domain), string));
  return reinterpret_cast<nvtxStringHandle_t>(uintptr_t{id});
}
nvtxStringHandle_t DomainRegisterStringW(nvtxDomainHandle_t domain, const wchar_t* string) {
  uint32_t id = Register(g_tool.next_string, NvtxEventKind::kRegisterString, DomainId(domain),
                         nullptr, string);
  auto chained =
      ChainedCore2<nvtxDomainRegisterStringW_impl_fntype>(NVTX_CBID_CORE2_DomainRegisterStringW);
  if (chained) KeepChainHandle(g_tool.chain_string, id, chained(ChainDomain(domain), string));
  return reinterpret_cast<nvtxStringHandle_t>(uintptr_t{id});
}
nvtxDomainHandle_t DomainCreateA(const char* name) {
  uint32_t id = Register(g_tool.next_domain, NvtxEventKind::kDomainCreate, 0, name, nullptr);
  auto chained = ChainedCore2<nvtxDomainCreateA_impl_fntype>(NVTX_CBID_CORE2_DomainCreateA);
  if (chained) KeepChainHandle(g_tool.chain_domain, id, chained(name));
  return reinterpret_cast<nvtxDomainHandle_t>(uintptr_t{id});
}
nvtxDomainHandle_t DomainCreateW(const wchar_t* name) {
  uint32_t id = Register(g_tool.next_domain, NvtxEventKind::kDomainCreate, 0, nullptr, name);
  auto chained = ChainedCore2<nvtxDomainCreateW_impl_fntype>(NVTX_CBID_CORE2_DomainCreateW);
  if (chained) KeepChainHandle(g_tool.chain_domain, id, chained(name));
  return reinterpret_cast<nvtxDomainHandle_t>(uintptr_t{id});
}
void DomainDestroy(nvtxDomainHandle_t domain) {
  auto chained = ChainedCore2<nvtxDomainDestroy_impl_fntype>(NVTX_CBID_CORE2_DomainDestroy);
  if (chained) chained(ChainDomain(domain));
}
void Initialize(const void* reserved) {
  auto chained = ChainedCore2<nvtxInitialize_impl_fntype>(NVTX_CBID_CORE2_Initialize);
  if (chained) chained(reserved);
}

template <typename Function>
NvtxFunctionPointer Entry(Function function) {
  return reinterpret_cast<NvtxFunctionPointer>(function);
}

// --- setting up an instance, and the chained tool ---

// Our shadow tables, as the chained tool's initialisation sees them.
struct Shadow {
  NvtxFunctionPointer core[NVTX_CBID_CORE_SIZE] = {};
  NvtxFunctionPointer core2[NVTX_CBID_CORE2_SIZE] = {};
  NvtxFunctionPointer* core_slots[NVTX_CBID_CORE_SIZE] = {};
  NvtxFunctionPointer* core2_slots[NVTX_CBID_CORE2_SIZE] = {};
};
Shadow* g_shadow = nullptr;  // under init_lock, while the chained tool initialises

const NvtxExportTableCallbacks* RealCallbacks() {
  return static_cast<const NvtxExportTableCallbacks*>(g_tool.initialising(NVTX_ETID_CALLBACKS));
}

int NVTX_API ShadowModuleTable(NvtxCallbackModule module, NvtxFunctionTable* out_table,
                               unsigned int* out_size) {
  switch (module) {
    case NVTX_CB_MODULE_CORE:
      if (out_table) *out_table = g_shadow->core_slots;
      if (out_size) *out_size = NVTX_CBID_CORE_SIZE - 1;
      return 1;
    case NVTX_CB_MODULE_CORE2:
      if (out_table) *out_table = g_shadow->core2_slots;
      if (out_size) *out_size = NVTX_CBID_CORE2_SIZE - 1;
      return 1;
    default: {  // naming of CUDA objects and the rest: the instance's own tables, untouched by us
      const NvtxExportTableCallbacks* real = RealCallbacks();
      return real != nullptr ? real->GetModuleFunctionTable(module, out_table, out_size) : 0;
    }
  }
}

const NvtxExportTableCallbacks kShadowCallbacks = {sizeof(NvtxExportTableCallbacks),
                                                   ShadowModuleTable};

const void* NVTX_API ShadowExportTable(uint32_t id) {
  if (id == NVTX_ETID_CALLBACKS) return &kShadowCallbacks;
  return g_tool.initialising(id);
}

void Say(format::MessageLevel level, const char* what, const char* path) {
  char text[512];
  snprintf(text, sizeof(text), "%s%s", what, path);
  PostMessage(level, text);
}

// Under init_lock: loads the user's own NVTX tool once; null where there is none.
NvtxInitializeInjectionNvtxFunc_t ChainedToolLocked() {
  if (g_tool.chain_tried) return g_tool.chain_init;
  g_tool.chain_tried = true;
  const char* path = getenv(kChainEnv);
  if (path == nullptr || path[0] == '\0') return nullptr;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  void* entry = library != nullptr ? dlsym(library, "InitializeInjectionNvtx2") : nullptr;
  if (entry == nullptr || entry == reinterpret_cast<void*>(&InitializeInjectionNvtx2)) {
    Say(format::MessageLevel::kWarning,
        "NVTX_INJECTION64_PATH named an NVTX tool that could not be loaded (not called): ", path);
    return nullptr;
  }
  // Another gprof-run's injected library (an enclosing session's, of another build): it records
  // into this session's directory too if initialised; the enclosing session sees the CUDA calls.
  if (dlsym(library, "InitializeInjection") != nullptr) {
    Say(format::MessageLevel::kInfo,
        "NVTX_INJECTION64_PATH named another gprof-run's injected library; not called: ", path);
    return nullptr;
  }
  Say(format::MessageLevel::kInfo,
      "NVTX_INJECTION64_PATH named the user's own NVTX tool; gprof-run records NVTX and forwards "
      "every call to it: ",
      path);
  g_tool.chain_init = reinterpret_cast<NvtxInitializeInjectionNvtxFunc_t>(entry);
  return g_tool.chain_init;
}

// Under init_lock: the chained tool sets up this instance (its naming tables directly, its core
// handlers into our shadow, which every handler above calls).
void InitializeChainLocked(NvtxGetExportTableFunc_t get_export_table) {
  NvtxInitializeInjectionNvtxFunc_t chain_init = ChainedToolLocked();
  if (chain_init == nullptr) return;
  Shadow shadow;
  for (int i = 0; i < NVTX_CBID_CORE_SIZE; ++i) shadow.core_slots[i] = &shadow.core[i];
  for (int i = 0; i < NVTX_CBID_CORE2_SIZE; ++i) shadow.core2_slots[i] = &shadow.core2[i];
  shadow.core_slots[0] = shadow.core2_slots[0] = nullptr;  // index 0 is no function
  g_shadow = &shadow;
  g_tool.initialising = get_export_table;
  int ok = chain_init(ShadowExportTable);
  g_shadow = nullptr;
  if (ok == 0) return;
  for (int i = 1; i < NVTX_CBID_CORE_SIZE; ++i) {
    if (shadow.core[i] != nullptr) g_tool.chain_core[i].store(shadow.core[i]);
  }
  for (int i = 1; i < NVTX_CBID_CORE2_SIZE; ++i) {
    if (shadow.core2[i] != nullptr) g_tool.chain_core2[i].store(shadow.core2[i]);
  }
}

void Fill(const NvtxExportTableCallbacks* callbacks, NvtxCallbackModule module,
          const NvtxFunctionPointer* handlers, unsigned int count) {
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks->GetModuleFunctionTable(module, &table, &size) == 0 || table == nullptr) return;
  for (unsigned int i = 1; i < count && i <= size; ++i) {
    if (table[i] != nullptr && handlers[i] != nullptr) *table[i] = handlers[i];
  }
}

}  // namespace

void NoteNvtxVariableChanged() {
  if (!g_started_with_variable) return;
  const char* now = getenv(kNvtxVariable);
  if (now != nullptr && strcmp(now, g_started_variable) == 0) return;
  Say(format::MessageLevel::kWarning,
      now == nullptr ? "the program unset NVTX_INJECTION64_PATH: NVTX first used after that is "
                       "not recorded"
                     : "the program changed NVTX_INJECTION64_PATH: NVTX first used after that is "
                       "not recorded; it names ",
      now == nullptr ? "" : now);
}

}  // namespace gprof::inject

using namespace gprof::inject;

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  // A set-user-ID program's NVTX loads us from its caller's environment: nothing is done there.
  if (SecureExecution() || get_export_table == nullptr) return 0;
  bool recording = RecordingActive();
  pthread_mutex_lock(&g_tool.init_lock);
  InitializeChainLocked(get_export_table);
  bool chained = g_tool.chain_init != nullptr;
  pthread_mutex_unlock(&g_tool.init_lock);
  if (!recording && !chained) return 0;  // NVTX stays a no-op in this instance, as without us
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;

  NvtxFunctionPointer core[NVTX_CBID_CORE_SIZE] = {};
  core[NVTX_CBID_CORE_MarkEx] = Entry(MarkEx);
  core[NVTX_CBID_CORE_MarkA] = Entry(MarkA);
  core[NVTX_CBID_CORE_MarkW] = Entry(MarkW);
  core[NVTX_CBID_CORE_RangeStartEx] = Entry(RangeStartEx);
  core[NVTX_CBID_CORE_RangeStartA] = Entry(RangeStartA);
  core[NVTX_CBID_CORE_RangeStartW] = Entry(RangeStartW);
  core[NVTX_CBID_CORE_RangeEnd] = Entry(RangeEnd);
  core[NVTX_CBID_CORE_RangePushEx] = Entry(RangePushEx);
  core[NVTX_CBID_CORE_RangePushA] = Entry(RangePushA);
  core[NVTX_CBID_CORE_RangePushW] = Entry(RangePushW);
  core[NVTX_CBID_CORE_RangePop] = Entry(RangePop);
  core[NVTX_CBID_CORE_NameCategoryA] = Entry(NameCategoryA);
  core[NVTX_CBID_CORE_NameCategoryW] = Entry(NameCategoryW);
  core[NVTX_CBID_CORE_NameOsThreadA] = Entry(NameOsThreadA);
  core[NVTX_CBID_CORE_NameOsThreadW] = Entry(NameOsThreadW);
  NvtxFunctionPointer core2[NVTX_CBID_CORE2_SIZE] = {};
  core2[NVTX_CBID_CORE2_DomainMarkEx] = Entry(DomainMarkEx);
  core2[NVTX_CBID_CORE2_DomainRangeStartEx] = Entry(DomainRangeStartEx);
  core2[NVTX_CBID_CORE2_DomainRangeEnd] = Entry(DomainRangeEnd);
  core2[NVTX_CBID_CORE2_DomainRangePushEx] = Entry(DomainRangePushEx);
  core2[NVTX_CBID_CORE2_DomainRangePop] = Entry(DomainRangePop);
  core2[NVTX_CBID_CORE2_DomainResourceCreate] = Entry(DomainResourceCreate);
  core2[NVTX_CBID_CORE2_DomainResourceDestroy] = Entry(DomainResourceDestroy);
  core2[NVTX_CBID_CORE2_DomainNameCategoryA] = Entry(DomainNameCategoryA);
  core2[NVTX_CBID_CORE2_DomainNameCategoryW] = Entry(DomainNameCategoryW);
  core2[NVTX_CBID_CORE2_DomainRegisterStringA] = Entry(DomainRegisterStringA);
  core2[NVTX_CBID_CORE2_DomainRegisterStringW] = Entry(DomainRegisterStringW);
  core2[NVTX_CBID_CORE2_DomainCreateA] = Entry(DomainCreateA);
  core2[NVTX_CBID_CORE2_DomainCreateW] = Entry(DomainCreateW);
  core2[NVTX_CBID_CORE2_DomainDestroy] = Entry(DomainDestroy);
  core2[NVTX_CBID_CORE2_Initialize] = Entry(Initialize);
  Fill(callbacks, NVTX_CB_MODULE_CORE, core, NVTX_CBID_CORE_SIZE);
  Fill(callbacks, NVTX_CB_MODULE_CORE2, core2, NVTX_CBID_CORE2_SIZE);
  return 1;
}
