// The real definition of a function this library interposes.
#pragma once

namespace gprof::inject {

// RTLD_NEXT finds it when its library is in the global scope; one loaded RTLD_LOCAL, as the
// dependency of a dlopen'ed module (PyTorch's extensions load libcudart and libcupti so), is not
// there, and the loaded objects are searched: those whose name contains `library_hint` first,
// then (`anywhere`) all the others. Takes the dynamic loader's lock: not for a call's path.
void* FindRealSymbol(const char* name, const char* library_hint, bool anywhere = true);

// Finds the real CUDA runtime functions not found yet (a libcudart loaded after this library):
// when CUDA starts (InitializeInjection), so that no call of the program looks one up.
void ResolveRuntimeFunctions();
// Whether a libcudart.so of the process has the functions interposition forwards to (after
// ResolveRuntimeFunctions). False: a runtime linked into the program statically, or only the
// driver API used, neither of which interposition sees.
bool LinkedRuntimeFound();

}  // namespace gprof::inject
