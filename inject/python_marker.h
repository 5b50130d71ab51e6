// Where gprof-run's kernel recorder reads a slow CUDA call's Python stack: a uprobe it attaches
// to this exported, empty function of libgprof_inject.so (by path and name), in the calling
// thread's own context, so the same BPF walker that reads stacks at waits reads it
// (bpf/python_stacks.bpf.h). Without the kernel recorder it costs a call at each slow call.
#pragma once

#include <cstdint>

extern "C" void gprof_python_stack_point(uint32_t tid, uint64_t enter_ns);
