// Words for people, shared by the text report and report.html: C++ names shortened, stacks folded
// to the frames worth reading, why a thread slept in words instead of a kernel function, thread
// names quoted, lines kept to a width. report.json keeps the full names and kernel functions these
// shorten; nothing here decides a fact, only how it is said.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"

namespace gprof::collector {

// The widest line the text report prints.
inline constexpr size_t kTextWidth = 160;

// A demangled C++ name as a reader wants it: no parameter lists, return types, clone suffixes
// ("[clone .constprop.0]") or ABI tags; template arguments past the first level elided as "<...>";
// std::string for std::__cxx11::basic_string<char, ...>; "(anonymous namespace)" as "{anon}";
// lambdas as "{lambda#1}". "unsigned long (anonymous namespace)::CallTimer::Time<X::{lambda()#1}>(
// std::__cxx11::basic_string<...> const&, char const*) [clone .isra.0]" ->
// "{anon}::CallTimer::Time<X::{lambda#1}>". A name that is no C++ signature comes back as it is.
std::string ShortCppName(std::string_view name);

// A frame "symbol+0x1c" with its symbol shortened (ShortCppName); "libc.so.6+0x891f5" unchanged.
std::string ShortFrame(std::string_view frame);

// Why a thread slept, in words, from the kernel function it slept in: "asleep in nanosleep",
// "reading a pipe", "waiting for a child to exit"; empty when the function is not one known here
// (the caller then names the function).
std::string ReasonInWords(std::string_view kernel_function);

// A thread as the text names it: "\"holder\" (21497)", or "21497" when it has no name; the name
// is Session::ThreadName's (Python's own where the kernel's is the interpreter's).
std::string QuotedThread(const Session& session, uint32_t tid);

// A wait object in the one notation the text uses for it: a futex by the variable that holds it,
// "fake_cuda::{anon}::driver_lock in libcudart.so.13", "_rtld_global+0xa08 in
// ld-linux-x86-64.so.2", else by its address and memory, "futex 0x5640925e7f30 on the heap"; "the
// mmap_lock of pid 12", "ioctl on nvidiactl", ...; never the kernel function (report.json keeps
// it).
// A futex in unnamed memory that `users` knows is "a lock inside libcuda.so.580.159.04 (futex
// 0x5640925e7f30 on the heap)".
std::string ObjectWords(const Session& session, const WaitObject& object,
                        const LockUsers* users = nullptr);

// What a thread asleep on `object` was doing, in words: "waiting for lock driver_lock in
// libcudart.so.13", "waiting on futex 0x5640925e7f30 on the heap", "asleep in
// nanosleep", "reading a pipe", "in ioctl on nvidiactl".
std::string WaitWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                      const LockUsers* users = nullptr);

// A sleep of `asleep_ns` on `object`: "asleep 40.1 ms in nanosleep", "asleep 40.1 ms waiting for
// lock driver_lock in libcudart.so.13", "asleep 3.0 ms reading a pipe".
std::string SleptWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                       uint64_t asleep_ns, const LockUsers* users = nullptr);

// One frame of a native or user stack, resolved.
struct StackFrame {
  uint64_t address = 0;
  std::string name;    // "symbol+0x1c", "libfoo.so+0x1c40", or the address; full, demangled
  std::string module;  // the mapped file's base name, "[vdso]", "anonymous memory"; empty: none
  std::string source;  // "freeze_app.cc:42" where debug information says; empty otherwise
  // The program's own code (the process's executable), not a library's.
  bool program = false;
  // The address lies in no recorded mapping, or in one that is not code: no return address (a
  // frame-pointer walk that read data, such as the text of a path, as a frame).
  bool junk = false;
};

// The frames of `ips` (innermost first) in process `pid` at `time_ns` (kLatest: its latest maps);
// `symbols`, one per ip where given (the injected library's names), name the frames they have.
std::vector<StackFrame> ResolveStack(const Session& session, uint32_t pid,
                                     const std::vector<uint64_t>& ips,
                                     const std::vector<std::string>* symbols, uint64_t time_ns);

// The lines a stack is shown as, innermost first, one frame a line: junk frames dropped; a run of
// frames inside one library folded to its outermost frame (where the caller entered it) after
// "... 2 frames in libcudart.so.13"; the library frames outside the program's outermost frame
// (thread start, libc) folded to one "... 3 frames in libstdc++.so.6, libc.so.6"; the names
// shortened; a frame's source line after it where known. Repeated blocks (recursion) are said once.
std::vector<std::string> FoldedFrameLines(const std::vector<StackFrame>& frames);

// `text` with every line at most `width` columns: a longer line is broken after "; " or ", ", or
// at a space, its continuation indented four more; a word longer than a line is cut.
std::string FitLines(std::string_view text, size_t width = kTextWidth);

}  // namespace gprof::collector
