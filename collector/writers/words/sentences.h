// Sentences about a session's waits, GPU and run, built from the names and objects below them:
// what a thread asleep was doing, what the GPU did during a call, what --delay, --duration and
// --max-size kept. Nothing here decides a fact, only how it is said.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"

namespace gprof::collector {

// What a thread asleep on `object` was doing, in words: "waiting for lock driver_lock in
// libcudart.so.13", "waiting on futex 0x5640925e7f30 on the heap", "asleep in
// nanosleep", "reading a pipe", "in ioctl on nvidiactl".
std::string WaitWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                      const LockUsers* users = nullptr);

// A sleep of `asleep_ns` on `object`: "asleep 40.1 ms in nanosleep", "asleep 40.1 ms waiting for
// lock driver_lock in libcudart.so.13", "asleep 3.0 ms reading a pipe".
std::string SleptWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                       uint64_t asleep_ns, const LockUsers* users = nullptr);

// What --delay / --duration kept: "recorded +5.000 s to +15.000 s, 10.000 s of 25.300 s (--delay 5
// --duration 10): what started outside was not recorded"; empty when the run had no window.
std::string WindowText(const Session& session);
// What --capture-range kept: "--capture-range=cudaProfilerApi: 3 windows, 900.000 ms of 3.200 s
// recorded: what started outside them was not recorded"; empty without a capture range.
std::string CaptureText(const Session& session);
// What --flight-recorder held and what ended it: "--flight-recorder 10 s: held the last 10.000 s,
// +15.301 s to +25.301 s (older records trimmed: 412 chunks, 1.2 MiB); the freeze trigger fired at
// +24.301 s (cudaStreamSynchronize took 812.000 ms on thread 4243, pid 4242) and the recording
// ended 1.000 s later"; empty without a flight recording. CaptureText says the same then.
std::string FlightText(const Session& session);
// Its two halves, as report.txt's "flight" and "trigger" lines say them.
std::string FlightHeldText(const Session& session);
std::string FlightEndText(const Session& session);
// The span a flight recording held: [start, end) on the session's clock; {0, 0} without one.
std::pair<uint64_t, uint64_t> FlightSpan(const Session& session);
// One capture window: "+0.512 s to +0.823 s, 311.000 ms, cudaProfilerStart (pid 12) to
// cudaProfilerStop (pid 12); not recorded before it: 512.000 ms".
std::string CaptureWindowText(const Session& session, size_t index);
// What the last window left out: "not recorded after the last window: 1.200 s"; empty if nothing.
std::string CaptureTailText(const Session& session);
// What --max-size cut: "stopped at --max-size 256.0 KiB at +1.234 s: 5,120 records (1.2 MiB) not
// written, nothing recorded from then on", or "within --max-size 256.0 KiB (used 80.0 KiB)"; empty
// when the run had no cap.
std::string MaxSizeText(const Session& session);
// A nested gprof-run's session: "pid 12 (gprof-run) recorded its command into /tmp/inner (1,234 CUDA
// calls): those are in that session, not this one".
std::string NestedSessionText(const NestedSession& nested);
// gprof-run -p: which running processes were recorded, for how long, and what ended it.
std::string AttachedText(const SessionMeta& meta);
// "Spin(long long) on stream 13", "Memcpy HtoD of 73.4 MiB (pageable to device) on stream 7".
// `short_names`: the kernel's name shortened for the text (report_words.h).
std::string DescribeGpuActivity(const Session& session, const GpuActivity& activity,
                                bool short_names = false);
// What the GPU did during `window` ("the call", "its cudaFree"): "the GPU was running
// Spin(long long) on stream 13 for 30.1 ms, launched by holder (429) in cudaLaunchKernel; busy
// 100% of the call", or "the GPU was idle during the call", and the call's own work if it was not
// what ran.
std::string DescribeGpuDuring(const Session& session, const GpuDuringCall& gpu,
                              const std::string& window, bool short_names = false);
// What a holder's GPU use was measured over: "its cudaFree", or "the hold" outside any call.
std::string HolderGpuWindow(const Session& session, const HolderActivity& holder);

// An NVTX range as the outputs name it: its message, then its domain in brackets where it has
// one ("forward", "load [loader]"); "(unnamed)" for a range without a message.
std::string RangeName(const Session& session, uint32_t name, uint32_t domain);
// Where the program said it was (the ranges, outermost first, nvtx_ranges.h): "in train_step >
// forward"; of several threads, each path with its threads: "in train_step > forward ("a" (12),
// "b" (14)); load [loader] ("worker" (13))". Empty when there were none.
std::string InRangesWords(const Session& session, const std::vector<uint32_t>& ranges);

}  // namespace gprof::collector
