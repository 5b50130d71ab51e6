// The process's libcupti, loaded at run time and reached through a table of its functions.
//
// Never a second, different libcupti in one process: PyTorch ships its own, and two copies would
// each think they own the device's profiling state. So the one already loaded wins; otherwise an
// explicit GPROF_CUPTI_LIB, then the one next to the process's libcudart (pip packages put them
// side by side), then the CUDA toolkit's.
#pragma once

#include <cupti.h>

#include <cstddef>

namespace gprof::inject {

inline constexpr char kCuptiLibEnv[] = "GPROF_CUPTI_LIB";

struct CuptiLibrary {
  char path[512];
  uint32_t version;  // cuptiGetVersion()

  CUptiResult (*GetVersion)(uint32_t*);
  CUptiResult (*GetResultString)(CUptiResult, const char**);
  CUptiResult (*Subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  // cuptiSubscribe_v2 names the subscriber that holds CUPTI when it is taken; may be null.
  CUptiResult (*SubscribeV2)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*,
                             CUpti_SubscriberParams*);
  CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
  CUptiResult (*EnableDomain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
  CUptiResult (*GetCallbackName)(CUpti_CallbackDomain, uint32_t, const char**);
  CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                           CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*ActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc);
  CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
  // cuptiActivityEnableAndDump also hands over the records of devices initialised before; may be
  // null (an older CUPTI).
  CUptiResult (*ActivityEnableAndDump)(CUpti_ActivityKind);
  CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
  CUptiResult (*ActivityFlushAll)(uint32_t);
  CUptiResult (*ActivityFlushPeriod)(uint32_t);
  CUptiResult (*ActivityGetNextRecord)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t*);
  CUptiResult (*GetTimestamp)(uint64_t*);
  CUptiResult (*SetThreadIdType)(CUpti_ActivityThreadIdType);

  // "CUPTI_ERROR_..." text for a result, never null.
  const char* ResultText(CUptiResult result) const;
};

// Finds and loads the libcupti for this process into `library`. On failure returns false with
// one line in `reason` (what was looked for, where).
bool LoadCuptiLibrary(CuptiLibrary* library, char* reason, size_t reason_size);

}  // namespace gprof::inject
