#include "inject/real_symbol.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <initializer_list>

namespace gprof::inject {
namespace {

struct SearchState {
  const char* symbol;
  const char* library_hint;  // null: any object
  const void* own_base;
  void* found;
};

int SearchLoadedObject(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<SearchState*>(data);
  const char* path = info->dlpi_name;
  if (path == nullptr || path[0] == '\0') return 0;
  if (search->library_hint != nullptr && strstr(path, search->library_hint) == nullptr) return 0;
  void* handle = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) return 0;
  void* symbol = dlsym(handle, search->symbol);
  dlclose(handle);
  Dl_info where;
  if (symbol == nullptr || dladdr(symbol, &where) == 0 || where.dli_fbase == search->own_base) {
    return 0;
  }
  search->found = symbol;
  return 1;
}

}  // namespace

void* FindRealSymbol(const char* name, const char* library_hint, bool anywhere) {
  if (void* symbol = dlsym(RTLD_NEXT, name)) return symbol;
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&FindRealSymbol), &self) == 0) return nullptr;
  for (const char* hint : {library_hint, static_cast<const char*>(nullptr)}) {
    if (hint == nullptr && !anywhere) break;
    SearchState search{name, hint, self.dli_fbase, nullptr};
    dl_iterate_phdr(SearchLoadedObject, &search);
    if (search.found != nullptr) return search.found;
  }
  return nullptr;
}

}  // namespace gprof::inject
