// The real definition of a function this library interposes.
#pragma once

namespace gprof::inject {

// RTLD_NEXT finds it when its library is in the global scope; one loaded RTLD_LOCAL, as the
// dependency of a dlopen'ed module (PyTorch's extensions load libcudart and libcupti so), is not
// there, and the loaded objects are searched: those whose name contains `library_hint` first.
void* FindRealSymbol(const char* name, const char* library_hint);

}  // namespace gprof::inject
