// How the fake runtime calls the fake driver's entry points (fake_libcuda.cc): each cu* function of
// libcuda.so.1 takes the work of the call and runs it, returning its result (a CUresult).
#pragma once

extern "C" {
typedef int (*fake_cuda_driver_work)(void* context);
typedef int (*fake_cuda_driver_entry_point)(fake_cuda_driver_work work, void* context);
}
