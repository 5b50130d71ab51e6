// Three small libraries whose locks tests/apps/kernel_scenarios contends, so that the diagnosis
// has to name a lock by the library whose code waits on it (issue 18): libheaplock keeps a mutex
// on the heap behind its API and another in its .bss; libheapwrap only calls libheaplock (a
// wrapper must not be named for a lock it does not take); libcxxlock keeps a std::mutex in a
// heap-allocated C++ object. Built with frame pointers, not stripped.
#pragma once

#include <cstdint>

extern "C" {

struct heaplock;

// A lock of its own on the heap.
heaplock* heaplock_create();
void heaplock_destroy(heaplock* lock);
// Takes `lock`, keeps it `hold_ns` on CPU, releases it; returns when it had it.
void heaplock_hold(heaplock* lock, uint64_t hold_ns);
// The same with the library's one static mutex (zero-initialized: in .bss).
void heaplock_hold_static(uint64_t hold_ns);
// The address of the static mutex's futex word, for the ground truth.
const void* heaplock_static_address();
// The address of `lock`'s futex word.
const void* heaplock_address(const heaplock* lock);

// libheapwrap: calls heaplock_hold.
void heapwrap_hold(heaplock* lock, uint64_t hold_ns);

// libcxxlock: a counter guarded by a std::mutex, made with new.
struct cxxlock;
cxxlock* cxxlock_create();
void cxxlock_destroy(cxxlock* counter);
void cxxlock_add(cxxlock* counter, uint64_t hold_ns);
const void* cxxlock_address(const cxxlock* counter);
}
