// C++ names as people read them: kernel names from CUPTI and native stack frames are mangled.
#pragma once

#include <string>
#include <string_view>

namespace gprof::collector {

// "_Z4Spinx" -> "Spin(long long)"; `name` unchanged when it is not a mangled C++ name.
std::string Demangle(std::string_view name);

// A stack frame "symbol+0xoffset" with its symbol demangled: "_ZN2at5emptyEv+0x1c" ->
// "at::empty()+0x1c". A frame without an offset is demangled whole; an empty one stays empty.
std::string DemangleFrame(std::string_view frame);

}  // namespace gprof::collector
