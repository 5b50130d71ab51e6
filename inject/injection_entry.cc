// CUDA_INJECTION64_PATH names this library too: the CUDA driver dlopens it (the same object that
// LD_PRELOAD loaded) at cuInit and calls InitializeInjection, which starts CUPTI capture
// (cupti_tracer.h). Returning success in every case lets the target run as it would without us.
#include "inject/cupti_tracer.h"
#include "inject/process_limits.h"

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  // A set-user-ID program's libcuda loads us from its caller's environment: nothing is done there.
  if (gprof::inject::SecureExecution()) return 1;
  gprof::inject::StartCudaCapture();
  return 1;
}
