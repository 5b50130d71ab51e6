#include "inject/cupti_library.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "inject/cupti_threads.h"
#include "inject/own_descriptors.h"

namespace gprof::inject {
namespace {

struct LoadedSearch {
  const char* name_part;
  char path[512];
};

int FindLoaded(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<LoadedSearch*>(data);
  if (info->dlpi_name == nullptr || strstr(info->dlpi_name, search->name_part) == nullptr) return 0;
  snprintf(search->path, sizeof(search->path), "%s", info->dlpi_name);
  return 1;
}

// Path of a loaded object whose file name contains `name_part`, or false.
bool LoadedObject(const char* name_part, char* path, size_t size) {
  LoadedSearch search{name_part, {}};
  if (dl_iterate_phdr(FindLoaded, &search) == 0) return false;
  snprintf(path, size, "%s", search.path);
  return true;
}

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
  return *out != nullptr;
}

bool ResolveAll(void* handle, CuptiLibrary* library) {
  Resolve(handle, "cuptiSubscribe_v2", &library->SubscribeV2);  // optional: CUPTI 12.x has none
  Resolve(handle, "cuptiActivityEnableAndDump", &library->ActivityEnableAndDump);  // optional
  return Resolve(handle, "cuptiGetVersion", &library->GetVersion) &&
         Resolve(handle, "cuptiGetResultString", &library->GetResultString) &&
         Resolve(handle, "cuptiSubscribe", &library->Subscribe) &&
         Resolve(handle, "cuptiUnsubscribe", &library->Unsubscribe) &&
         Resolve(handle, "cuptiEnableDomain", &library->EnableDomain) &&
         Resolve(handle, "cuptiGetCallbackName", &library->GetCallbackName) &&
         Resolve(handle, "cuptiActivityRegisterCallbacks", &library->ActivityRegisterCallbacks) &&
         Resolve(handle, "cuptiActivityRegisterTimestampCallback",
                 &library->ActivityRegisterTimestampCallback) &&
         Resolve(handle, "cuptiActivityEnable", &library->ActivityEnable) &&
         Resolve(handle, "cuptiActivityDisable", &library->ActivityDisable) &&
         Resolve(handle, "cuptiActivityFlushAll", &library->ActivityFlushAll) &&
         Resolve(handle, "cuptiActivityFlushPeriod", &library->ActivityFlushPeriod) &&
         Resolve(handle, "cuptiActivityGetNextRecord", &library->ActivityGetNextRecord) &&
         Resolve(handle, "cuptiActivityGetNumDroppedRecords",
                 &library->ActivityGetNumDroppedRecords) &&
         Resolve(handle, "cuptiGetTimestamp", &library->GetTimestamp) &&
         Resolve(handle, "cuptiSetThreadIdType", &library->SetThreadIdType);
}

// "libcudart.so.13" -> ".13": the libcupti of the same major version goes with it.
const char* SonameVersion(const char* path) {
  const char* so = strstr(path, ".so");
  return so != nullptr ? so + 3 : "";
}

// The candidates for a libcupti that is not loaded yet, most specific first.
std::vector<std::string> Candidates() {
  std::vector<std::string> candidates;
  if (const char* explicit_path = getenv(kCuptiLibEnv); explicit_path && *explicit_path) {
    candidates.emplace_back(explicit_path);
  }
  char cudart[512];
  if (LoadedObject("libcudart.so", cudart, sizeof(cudart)) && strrchr(cudart, '/') != nullptr) {
    std::string path(cudart);
    std::string dir = path.substr(0, path.rfind('/'));
    std::string version = SonameVersion(path.c_str() + dir.size());
    candidates.push_back(dir + "/libcupti.so" + version);                       // nvidia/cu13/lib
    candidates.push_back(dir + "/../../cuda_cupti/lib/libcupti.so" + version);  // cu12 wheels
  }
  for (const char* dir : {"/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64",
                          "/usr/local/cuda/targets/x86_64-linux/lib"}) {
    candidates.push_back(std::string(dir) + "/libcupti.so");
  }
  return candidates;
}

}  // namespace

const char* CuptiLibrary::ResultText(CUptiResult result) const {
  const char* text = nullptr;
  if (GetResultString == nullptr || GetResultString(result, &text) != CUPTI_SUCCESS || !text) {
    return "unknown CUPTI error";
  }
  return text;
}

bool LoadCuptiLibrary(CuptiLibrary* library, char* reason, size_t reason_size) {
  memset(library, 0, sizeof(*library));
  void* handle = nullptr;
  char loaded[512];
  if (LoadedObject("libcupti.so", loaded, sizeof(loaded))) {
    handle = dlopen(loaded, RTLD_NOW | RTLD_NOLOAD);
    snprintf(library->path, sizeof(library->path), "%s", loaded);
  } else {
    for (const std::string& candidate : Candidates()) {
      if (access(candidate.c_str(), R_OK) != 0) continue;
      handle = DlopenOutsideTheProgramsTable(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) continue;
      snprintf(library->path, sizeof(library->path), "%.*s",
               static_cast<int>(sizeof(library->path) - 1), candidate.c_str());
      break;
    }
    if (handle == nullptr) {
      snprintf(reason, reason_size,
               "no libcupti found (looked next to libcudart, in /usr/local/cuda; set %s)",
               kCuptiLibEnv);
      return false;
    }
  }
  if (handle == nullptr || !ResolveAll(handle, library)) {
    snprintf(reason, reason_size, "%s lacks CUPTI functions gprof-run needs", library->path);
    return false;
  }
  if (library->GetVersion(&library->version) != CUPTI_SUCCESS) library->version = 0;
  NoteCuptiCode(reinterpret_cast<const void*>(library->GetVersion));
  return true;
}

}  // namespace gprof::inject
