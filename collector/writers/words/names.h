// The vocabulary's names (the layer above model/value_format.h's values): C++ names shortened,
// a thread as the text quotes it, why a thread slept in words instead of a kernel function.
// report.json keeps the full names and kernel functions these shorten; nothing here decides a
// fact, only how it is said.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "collector/model/model.h"

namespace gprof::collector {

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

// "1 gap", "3 threads", "2 processes": a count and its word, plural where it is not one.
std::string CountOf(size_t count, std::string_view word);

// A thread as the text names it: "\"holder\" (21497)", or "21497" when it has no name; the name
// is Session::ThreadName's (Python's own where the kernel's is the interpreter's).
std::string QuotedThread(const Session& session, uint32_t tid);
}  // namespace gprof::collector
