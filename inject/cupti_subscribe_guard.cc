// CUPTI takes one subscriber and one set of activity buffer callbacks. When gprof-run holds them,
// a tool inside the target (torch.profiler's Kineto) either gets
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, or registers its own buffers and takes the GPU
// records from then on, each time without a word to the user. Interposing the two calls lets the
// session say so, with the way out.
#include <cupti.h>

#include <atomic>

#include "inject/cupti_tracer.h"
#include "inject/real_symbol.h"
#include "inject/recorder.h"

namespace gprof::inject {
namespace {

std::atomic<bool> g_reported{false};
std::atomic<bool> g_buffers_reported{false};

CUptiResult NoteRefusedSubscriber(CUptiResult result) {
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && ActiveCupti() != nullptr &&
      !g_reported.exchange(true)) {
    PostMessage(format::MessageLevel::kWarning,
                "another CUPTI client in this process (torch.profiler, Kineto, ...) could not "
                "subscribe because gprof-run holds CUPTI: it records no GPU activity; run "
                "gprof-run with --cuda=preload to leave CUPTI to it");
  }
  return result;
}

void NoteForeignBufferCallbacks() {
  if (ActiveCupti() != nullptr && !g_buffers_reported.exchange(true)) {
    PostMessage(format::MessageLevel::kWarning,
                "another CUPTI client in this process (torch.profiler, Kineto, ...) registered its "
                "own activity buffers: gprof-run's GPU timeline stops there; run gprof-run with "
                "--cuda=preload to leave CUPTI to it");
  }
}

template <typename Fn>
Fn Real(const char* name) {
  return reinterpret_cast<Fn>(FindRealSymbol(name, "libcupti"));
}

}  // namespace
}  // namespace gprof::inject

#pragma GCC visibility push(default)
extern "C" {

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                           void* userdata) {
  static const auto real = gprof::inject::Real<decltype(&cuptiSubscribe)>("cuptiSubscribe");
  if (real == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  return gprof::inject::NoteRefusedSubscriber(real(subscriber, callback, userdata));
}

CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                              void* userdata, CUpti_SubscriberParams* params) {
  static const auto real = gprof::inject::Real<decltype(&cuptiSubscribe_v2)>("cuptiSubscribe_v2");
  if (real == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  return gprof::inject::NoteRefusedSubscriber(real(subscriber, callback, userdata, params));
}

// gprof-run registers its own through the function table (cupti_library.h), not through here.
CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  static const auto real = gprof::inject::Real<decltype(&cuptiActivityRegisterCallbacks)>(
      "cuptiActivityRegisterCallbacks");
  if (real == nullptr) return CUPTI_ERROR_NOT_INITIALIZED;
  gprof::inject::NoteForeignBufferCallbacks();
  return real(request, complete);
}

}  // extern "C"
#pragma GCC visibility pop
