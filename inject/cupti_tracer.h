// CUPTI capture: every CUDA runtime and driver API call (callbacks) and the GPU's own timeline
// (activity records), started from InitializeInjection when the CUDA driver loads this library
// through CUDA_INJECTION64_PATH. When CUPTI cannot be used (none found, taken by another tool,
// refused), the interposition path (runtime_interposer.cc) keeps recording, and the session says
// why.
#pragma once

#include <cstddef>
#include <cstdint>

#include "inject/cupti_library.h"
#include "inject/format/session_format.h"

namespace gprof::inject {

// auto (CUPTI when it can be used, else interposition), cupti (the same, but a failure is an
// error in the report), preload (interposition only; CUPTI is left to other tools).
inline constexpr char kCudaModeEnv[] = "GPROF_CUDA_MODE";
// Where API calls are taken from, to compare what each part of the capture costs
// (scripts/gpu/bench_capture_parts.sh): "callbacks" (default: CUPTI's callbacks, every runtime
// and driver call), "activity" (CUPTI's own RUNTIME and DRIVER activity records), "gpu-only" (the
// GPU's side alone, no API call recorded).
inline constexpr char kCuptiApiRecordsEnv[] = "GPROF_CUPTI_API_RECORDS";

// Called once per process from InitializeInjection.
void StartCudaCapture();

// --- for the writer thread ---

struct CaptureStatus {
  format::CaptureMode mode;
  uint32_t cupti_version;
  char text[600];  // the libcupti in use, or why none is
};
// The capture status, when it changed since the last call.
bool TakeCaptureStatus(CaptureStatus* out);

struct ActivityBuffer {
  uint8_t* data;
  size_t valid_size;
};
// A buffer of activity records CUPTI has completed, oldest first; the writer encodes it, then
// hands it back with ReturnActivityBuffer.
bool TakeCompletedActivityBuffer(ActivityBuffer* out);
void ReturnActivityBuffer(uint8_t* data);

// When CUPTI last handed over a buffer (CLOCK_MONOTONIC ns), 0 if never.
uint64_t LastActivityBufferNs();

// Activity records CUPTI dropped since the last call (CUPTI is asked about every context seen).
uint64_t TakeDroppedActivityRecords();

// The loaded CUPTI, once capture through it has started; null otherwise.
const CuptiLibrary* ActiveCupti();

// The name of a CUPTI api id (format::CuptiApiId), without CUPTI's version suffix.
bool CuptiApiName(uint32_t api_id, char* out, size_t size);

// CUPTI's clock minus CLOCK_MONOTONIC now, with its uncertainty (half the bracketing interval).
bool MeasureCuptiClockOffset(int64_t* offset_ns, uint64_t* uncertainty_ns);

// Set by a fatal signal's handler: the writer flushes CUPTI and the file, then calls
// FinishSignalFlush so that the handler can let the signal take its course.
bool SignalFlushRequested();
void FinishSignalFlush();

}  // namespace gprof::inject
