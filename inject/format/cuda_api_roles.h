// What a CUDA API call does, by its name as the session files hold it (the runtime's and the
// driver's, from interposition or CUPTI, whose version suffixes are gone, "_ptsz" kept): one table
// that every part asks, so that no two parts tell a role by names of their own. Names are matched
// by prefix, so a rule covers the _ptsz, _v2 and Ex forms, or anywhere in the name where a rule
// says so. Header-only and allocation-free, so the injected library may ask it too.
#pragma once

#include <cstdint>
#include <string_view>

namespace gprof::format {

enum CudaApiRole : uint32_t {
  // Loads a module, or resolves a kernel in one: under lazy loading a kernel's first use loads its
  // module inside these calls, and CUPTI's overhead records do not cover all of it.
  kCudaLoadsModules = 1u << 0,
  // Launches one kernel: cudaLaunchKernel, __cudaLaunchKernel, cudaLaunchKernelExC,
  // cudaLaunchCooperativeKernel, cuLaunchKernel, cuLaunchKernelEx...; not cudaLaunchHostFunc,
  // which runs on the host, nor graph launches, whose kernels are many.
  kCudaLaunchesKernel = 1u << 1,
  kCudaLaunchesGraph = 1u << 2,  // cudaGraphLaunch, cuGraphLaunch
  // Begins or ends a stream capture (cudaStreamBeginCaptureToGraph too).
  kCudaBeginsCapture = 1u << 3,
  kCudaEndsCapture = 1u << 4,
};

struct CudaApiRoleRule {
  std::string_view text;
  bool anywhere;  // false: the name starts with `text`; true: holds it anywhere
  uint32_t roles;  // CudaApiRole bits
};

inline constexpr CudaApiRoleRule kCudaApiRoleRules[] = {
    {"cuModuleLoad", false, kCudaLoadsModules},
    {"cuLibraryLoad", false, kCudaLoadsModules},
    {"cuLibraryGetModule", false, kCudaLoadsModules},
    {"cuLibraryGetKernel", false, kCudaLoadsModules},
    {"cuKernelGetFunction", false, kCudaLoadsModules},
    {"cuModuleGetFunction", false, kCudaLoadsModules},
    {"LaunchKernel", true, kCudaLaunchesKernel},
    {"LaunchCooperativeKernel", true, kCudaLaunchesKernel},
    {"cudaGraphLaunch", false, kCudaLaunchesGraph},
    {"cuGraphLaunch", false, kCudaLaunchesGraph},
    {"cudaStreamBeginCapture", false, kCudaBeginsCapture},
    {"cuStreamBeginCapture", false, kCudaBeginsCapture},
    {"cudaStreamEndCapture", false, kCudaEndsCapture},
    {"cuStreamEndCapture", false, kCudaEndsCapture},
};

// The CudaApiRole bits of the call named `name`; 0: none of these.
constexpr uint32_t CudaApiRoles(std::string_view name) {
  uint32_t roles = 0;
  for (const CudaApiRoleRule& rule : kCudaApiRoleRules) {
    bool matches = rule.anywhere ? name.find(rule.text) != std::string_view::npos
                                 : name.starts_with(rule.text);
    if (matches) roles |= rule.roles;
  }
  return roles;
}

constexpr bool HasCudaApiRole(std::string_view name, CudaApiRole role) {
  return (CudaApiRoles(name) & role) != 0;
}

static_assert(HasCudaApiRole("cudaLaunchKernel_ptsz", kCudaLaunchesKernel));
static_assert(HasCudaApiRole("__cudaLaunchKernel", kCudaLaunchesKernel));
static_assert(!HasCudaApiRole("cudaLaunchHostFunc", kCudaLaunchesKernel));
static_assert(CudaApiRoles("cudaGraphLaunch_ptsz") == kCudaLaunchesGraph);
static_assert(HasCudaApiRole("cuModuleLoadData", kCudaLoadsModules));

}  // namespace gprof::format
