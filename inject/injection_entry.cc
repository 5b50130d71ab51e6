// CUDA_INJECTION64_PATH names this library too: the CUDA driver dlopens it (the same object that
// LD_PRELOAD loaded) at cuInit and calls InitializeInjection. Returning success lets the target run
// as it would without us. Runtime calls are recorded by interposition (runtime_interposer.cc);
// driver-level capture through CUPTI subscribes here.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() { return 1; }
