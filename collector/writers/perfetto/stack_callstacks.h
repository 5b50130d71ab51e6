// The stacks of the time-ordered merge's events (timeline_writer.cc) as Perfetto callstacks
// (interners.h): a wait's user, Python and kernel frames, a slow CUDA call's native and Python
// frames.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "collector/model/model.h"
#include "collector/symbols/python_frames.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/perfetto/interners.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"

namespace gprof::collector::perfetto {

// A frame's "function+0x1c" as the function and the offset into it; the text as it is, at 0, when
// it has no such offset.
inline std::pair<std::string_view, uint64_t> SplitOffset(std::string_view frame) {
  size_t plus = frame.rfind("+0x");
  if (plus == std::string_view::npos || plus == 0) return {frame, 0};
  const char* digits = frame.data() + plus + 3;
  const char* end = frame.data() + frame.size();
  uint64_t offset = 0;
  auto [stop, error] = std::from_chars(digits, end, offset, 16);
  if (error != std::errc() || stop != end) return {frame, 0};
  return {frame.substr(0, plus), offset};
}

// The kernel's code, as one mapping named the way perf names it. Its frames are recorded already
// symbolized ("futex_wait+0xf2", not an address in a file), so a kernel frame's rel_pc is its
// offset into its function: the text stacks' "+0xf2", kept.
constexpr std::string_view kKernelMapping = "[kernel.kallsyms]";

// A Python frame as a callstack frame. Perfetto's UI names a frame by its function and shows
// its mapping beside it; the frame's line is in the function's name ("step (train.py:42)"),
// where the flame graph shows it and keeps two lines of one function apart, the program's file
// its mapping (co_filename), and its kind Frame.KIND_INTERPRETED, which the UI tells from
// native code. Frame.line_number and source_path_iid would say the same, but the UI's stack views
// show neither. rel_pc, which a mapping needs, is 0: a code object's bytecode offset is no offset
// into that file.
inline uint64_t InternPythonFrame(CallstackInterner& callstacks, const PythonFrame& frame) {
  if (!frame.named)
    return callstacks.InternFrame(PythonFrameText(frame), CallstackInterner::Kind::kInterpreted);
  std::string where = IsProgramFrame(frame) ? frame.file : PythonShortPath(frame.file);
  std::string line = frame.line ? std::to_string(*frame.line) : "?";
  return callstacks.InternFrame(frame.function + " (" + where + ":" + line + ")",
                                CallstackInterner::Kind::kInterpreted, frame.file, 0);
}

// The outermost frame of a Python stack whose walk stopped early.
inline uint64_t InternPythonEnd(CallstackInterner& callstacks, const ResolvedPythonStack& python) {
  return callstacks.InternFrame(python.truncated ? "... (Python stack truncated)"
                                                 : "... (Python stack incomplete)",
                                CallstackInterner::Kind::kInterpreted);
}

// User stacks as callstack frames, with the Python frames the thread ran at that time merged in
// at the eval loop as report.json's "stack" has them (MergeOrder), or the Python frames alone
// where no user stack was recorded; made once per stack, Python stack and address space: a
// thread that waits in one place over and over has one stack.
class UserStackNames {
 public:
  struct Names {
    std::vector<uint64_t> frame_iids;  // CallstackInterner's, outermost first; empty: not known
  };
  UserStackNames(const Session& session, CallstackInterner& callstacks)
      : session_(session), callstacks_(callstacks) {}

  // Stack `stack_id` (negative: none) of process `pid` at `time_ns`, with `python` (null: none).
  // Each native frame's function is its symbol, else where it is ("libfoo.so+0x1c"), so that a
  // frame is one place of the program wherever it was called from. A block of frames repeated
  // back to back (a recursion to the walk's depth limit) is there once, then a frame that says
  // how many more times it came, in CollapseFrameRepeats' words ("... Recurse(int) repeated 199
  // more times"); a walk that hit its depth limit ends (outermost native) with a frame
  // "... (truncated)", a Python walk that stopped early with "... (Python stack incomplete)".
  const Names& Stack(uint32_t pid, int32_t stack_id, uint64_t time_ns, const PythonStack* python) {
    auto process = session_.processes.find(pid);
    std::pair<int64_t, size_t> epoch{-1, 0};
    if (process != session_.processes.end()) epoch = process->second.MapsEpoch(time_ns);
    int64_t python_key = python != nullptr ? int64_t{python->frames} : -1;
    auto [entry, inserted] =
        names_.try_emplace({pid, stack_id, epoch.first, epoch.second, python_key});
    if (!inserted) return entry->second;
    auto stack = stack_id >= 0 ? session_.user_stacks.find(stack_id) : session_.user_stacks.end();
    static const std::vector<uint64_t> kNoIps;
    const std::vector<uint64_t>& ips =
        stack != session_.user_stacks.end() ? stack->second.ips : kNoIps;
    ResolvedPythonStack resolved;
    if (python != nullptr) resolved = ResolvePythonStack(session_, *python);
    if (ips.empty() && resolved.frames.empty()) return entry->second;

    std::vector<UserLocation> locations(ips.size());
    std::vector<std::string_view> symbols(ips.size());
    for (size_t i = 0; i < ips.size(); ++i) {
      AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
      locations[i] = LocateUserAddress(session_, pid, ips[i], time_ns, use);
      symbols[i] = locations[i].symbol;
    }
    // Innermost first: each frame's call site (FrameText, PythonFrameText), its function's name
    // and its frame.
    std::vector<std::string> sites, functions;
    std::vector<uint64_t> frames;
    bool native_end = false;  // the "... (truncated)" frame is in
    auto end_native = [&] {
      if (native_end || stack == session_.user_stacks.end() || !stack->second.truncated) return;
      native_end = true;
      sites.push_back("... (truncated)");
      functions.push_back(sites.back());
      frames.push_back(callstacks_.InternFrame(sites.back(), CallstackInterner::Kind::kNative));
    };
    for (const MergeSlot& slot : MergeOrder(symbols, python != nullptr ? &resolved : nullptr)) {
      if (slot.python != nullptr) {
        if (slot.native == ips.size()) end_native();
        sites.push_back(PythonFrameText(*slot.python));
        functions.push_back(sites.back());
        frames.push_back(InternPythonFrame(callstacks_, *slot.python));
        continue;
      }
      const UserLocation& location = locations[slot.native];
      sites.push_back(FrameText(location, ips[slot.native]));
      functions.push_back(location.symbol.empty() ? sites.back() : location.symbol);
      frames.push_back(callstacks_.InternFrame(functions.back(), CallstackInterner::Kind::kNative,
                                               location.file_backed ? location.module : "",
                                               location.module_offset));
    }
    end_native();
    if (resolved.incomplete || resolved.truncated)
      frames.push_back(InternPythonEnd(callstacks_, resolved));
    std::vector<uint64_t>& shown = entry->second.frame_iids;
    size_t next = 0;
    for (const FrameRepeat& repeat : FindFrameRepeats(sites)) {
      shown.insert(shown.end(), frames.begin() + next,
                   frames.begin() + repeat.first + repeat.length);
      shown.push_back(callstacks_.InternFrame(FrameRepeatText(repeat, functions[repeat.first]),
                                              CallstackInterner::Kind::kNative));
      next = repeat.first + repeat.times * repeat.length;
    }
    shown.insert(shown.end(), frames.begin() + next, frames.end());
    std::reverse(shown.begin(), shown.end());
    return entry->second;
  }

 private:
  const Session& session_;
  CallstackInterner& callstacks_;
  // By process, stack id, the maps epoch (Process::MapsEpoch) that names its addresses and the
  // Python stack's frame list (-1: none).
  std::map<std::tuple<uint32_t, int32_t, int64_t, size_t, int64_t>, Names> names_;
};

// The callstack of a wait (its user and Python frames, then the kernel's, innermost last as
// Perfetto orders them) and of a slow CUDA call (its native stack and Python frames), made once
// per stack. They are the trace's only record of a stack: a stack as text besides would carry
// each stack twice.
class StackCallstacks {
 public:
  StackCallstacks(const Session& session, UserStackNames& user_stacks,
                  CallstackInterner& callstacks)
      : session_(session), user_stacks_(user_stacks), callstacks_(callstacks) {}

  // `python`: the Python stack of the thread at that time, or null. 0 when no stack is known.
  uint64_t OfWait(uint32_t pid, int32_t user_stack_id, int32_t kernel_stack_id, uint64_t time_ns,
                  const PythonStack* python) {
    if (user_stack_id < 0 && kernel_stack_id < 0 && python == nullptr) return 0;
    const std::vector<uint64_t>* user = nullptr;
    if (user_stack_id >= 0 || python != nullptr)
      user = &user_stacks_.Stack(pid, user_stack_id, time_ns, python).frame_iids;
    auto [entry, inserted] = waits_.try_emplace({user, kernel_stack_id}, 0);
    if (inserted) {
      std::vector<uint64_t> frames;
      if (user != nullptr) frames = *user;
      std::vector<std::string> kernel = session_.KernelStack(kernel_stack_id);
      for (auto frame = kernel.rbegin(); frame != kernel.rend(); ++frame) {
        auto [function, offset] = SplitOffset(*frame);
        frames.push_back(callstacks_.InternFrame(function, CallstackInterner::Kind::kKernel,
                                                 kKernelMapping, offset));
      }
      entry->second = callstacks_.Intern(frames);
    }
    return entry->second;
  }

  // The native stack recorded at the call's exit with `python` (the call's Python stack, or
  // null) merged in at the eval loop, as report.json's "stack" of the call; 0: neither.
  uint64_t OfCall(const ApiCall& call, const PythonStack* python) {
    const NativeStack* stack = session_.CallStackOf(call);
    std::vector<std::string> names;
    if (stack != nullptr) names = NativeStackFrames(session_, *stack);
    if (stack != nullptr) names.resize(std::min(names.size(), stack->ips.size()));
    ResolvedPythonStack resolved;
    if (python != nullptr) resolved = ResolvePythonStack(session_, *python);
    std::vector<uint64_t> frames;  // innermost first
    for (const MergeSlot& slot :
         MergeOrder({names.begin(), names.end()}, python != nullptr ? &resolved : nullptr)) {
      if (slot.python != nullptr) {
        frames.push_back(InternPythonFrame(callstacks_, *slot.python));
        continue;
      }
      size_t i = slot.native;
      // The injected library's symbol ("cudaFree+0x10"), else the mapped file's, else where. A
      // symbol's offset goes where the frame's mapping and offset in it say as much; in memory no
      // file holds, it stays in the name.
      bool symbol = i < stack->symbols.size() && !stack->symbols[i].empty();
      UserLocation location =
          LocateUserAddress(session_, stack->pid, stack->ips[i], call.exit_ns,
                            i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress);
      std::string_view function = names[i];
      if (symbol && location.file_backed) function = SplitOffset(names[i]).first;
      frames.push_back(callstacks_.InternFrame(function, CallstackInterner::Kind::kNative,
                                               location.file_backed ? location.module : "",
                                               location.module_offset));
    }
    if (resolved.incomplete || resolved.truncated)
      frames.push_back(InternPythonEnd(callstacks_, resolved));
    std::reverse(frames.begin(), frames.end());
    return callstacks_.Intern(frames);
  }

 private:
  const Session& session_;
  UserStackNames& user_stacks_;
  CallstackInterner& callstacks_;
  // By the user stack's frames (UserStackNames' entries do not move) and the kernel stack.
  std::map<std::pair<const std::vector<uint64_t>*, int32_t>, uint64_t> waits_;
};

}  // namespace gprof::collector::perfetto
