// A user's own NVTX tool (NVTX_INJECTION64_PATH), for tests/nvtx_test.cc: counts the calls it
// gets and checks that the handles and ids it gave are the ones it is handed back; at exit writes
// "pushes=N pops=N ... foreign_handles=N" to the file NVTX_COUNT_OUT names.
#define NVTX_NO_IMPL
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "nvtx3/nvToolsExt.h"

namespace {

std::atomic<unsigned> g_pushes, g_pops, g_starts, g_ends, g_marks, g_domains, g_strings,
    g_registered_uses, g_foreign_handles, g_inits;
// Handles and ids of this tool's own making, unlike the injected library's.
nvtxDomainHandle_t const kDomain = reinterpret_cast<nvtxDomainHandle_t>(0x7000);
nvtxStringHandle_t const kString = reinterpret_cast<nvtxStringHandle_t>(0x8000);
constexpr nvtxRangeId_t kRangeId = 0x9000;

void CheckDomain(nvtxDomainHandle_t domain) {
  if (domain != nullptr && domain != kDomain) ++g_foreign_handles;
}
int Push(const nvtxEventAttributes_t* attributes) {
  if (attributes->messageType == NVTX_MESSAGE_TYPE_REGISTERED) {
    if (attributes->message.registered == kString)
      ++g_registered_uses;
    else
      ++g_foreign_handles;
  }
  return int(g_pushes++);
}
int PushA(const char*) { return int(g_pushes++); }
int PushW(const wchar_t*) { return int(g_pushes++); }
int Pop() { return int(g_pops++); }
nvtxRangeId_t StartA(const char*) {
  ++g_starts;
  return kRangeId;
}
nvtxRangeId_t DomainStart(nvtxDomainHandle_t domain, const nvtxEventAttributes_t*) {
  CheckDomain(domain);
  ++g_starts;
  return kRangeId;
}
void DomainEnd(nvtxDomainHandle_t domain, nvtxRangeId_t id) {
  CheckDomain(domain);
  if (id != kRangeId) ++g_foreign_handles;
  ++g_ends;
}
void DomainMark(nvtxDomainHandle_t domain, const nvtxEventAttributes_t*) {
  CheckDomain(domain);
  ++g_marks;
}
nvtxDomainHandle_t DomainCreate(const char*) {
  ++g_domains;
  return kDomain;
}
nvtxStringHandle_t RegisterString(nvtxDomainHandle_t domain, const char*) {
  CheckDomain(domain);
  ++g_strings;
  return kString;
}

void WriteCounts() {
  const char* path = std::getenv("NVTX_COUNT_OUT");
  FILE* out = path != nullptr ? std::fopen(path, "w") : nullptr;
  if (out == nullptr) return;
  std::fprintf(out,
               "inits=%u pushes=%u pops=%u starts=%u ends=%u marks=%u domains=%u strings=%u "
               "registered_uses=%u foreign_handles=%u\n",
               g_inits.load(), g_pushes.load(), g_pops.load(), g_starts.load(), g_ends.load(),
               g_marks.load(), g_domains.load(), g_strings.load(), g_registered_uses.load(),
               g_foreign_handles.load());
  std::fclose(out);
}

template <typename Function>
void Set(NvtxFunctionTable table, unsigned size, unsigned cbid, Function function) {
  if (cbid <= size && table[cbid] != nullptr)
    *table[cbid] = reinterpret_cast<NvtxFunctionPointer>(function);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) {
    return 0;
  }
  Set(core, core_size, NVTX_CBID_CORE_RangePushEx, Push);
  Set(core, core_size, NVTX_CBID_CORE_RangePushA, PushA);
  Set(core, core_size, NVTX_CBID_CORE_RangePushW, PushW);
  Set(core, core_size, NVTX_CBID_CORE_RangePop, Pop);
  Set(core, core_size, NVTX_CBID_CORE_RangeStartA, StartA);
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, DomainStart);
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeEnd, DomainEnd);
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, DomainMark);
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, DomainCreate);
  Set(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, RegisterString);
  if (g_inits++ == 0) std::atexit(WriteCounts);
  return 1;
}
