#include "collector/symbols/demangle.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace gprof::collector {

std::string Demangle(std::string_view name) {
  // Only Itanium-mangled names: __cxa_demangle also "demangles" plain words as type names ("i"
  // becomes "int").
  if (!name.starts_with("_Z")) return std::string(name);
  std::string mangled(name);  // __cxa_demangle needs a NUL-terminated string
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || demangled == nullptr) return mangled;
  return demangled.get();
}

std::string DemangleFrame(std::string_view frame) {
  size_t plus = frame.rfind("+0x");
  if (plus == std::string_view::npos) return Demangle(frame);
  return Demangle(frame.substr(0, plus)) + std::string(frame.substr(plus));
}

}  // namespace gprof::collector
