#include "collector/analysis/on_cpu_samples.h"

#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "collector/symbols/user_symbols.h"

namespace gprof::collector {
namespace {

std::string BaseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The interpreter's own code (the python executable, libpython): a Python thread runs it all
// the time; its Python frames say what it ran.
bool IsInterpreter(const std::string& module) {
  return module.starts_with("python") || module.starts_with("libpython");
}

NativeFrame NameFrame(const Session& session, const NativeStack& stack, size_t index) {
  UserLocation location =
      LocateUserAddress(session, stack.pid, stack.ips[index], stack.time_ns,
                        index == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress);
  NativeFrame frame;
  frame.function = location.symbol;
  frame.module = BaseName(location.module);
  frame.source = location.source;
  frame.program = location.file_backed && !location.symbol.empty() &&
                  !IsSystemLibrary(frame.module) && !IsInterpreter(frame.module);
  return frame;
}

// The frames a stack is counted under: where the program's code was, and its frames around it.
std::vector<NativeFrame> HotFrames(const Session& session, const NativeStack& stack) {
  std::vector<NativeFrame> frames;
  for (size_t i = 0; i < stack.ips.size(); ++i) frames.push_back(NameFrame(session, stack, i));
  auto next_program = [&](size_t from) {
    while (from < frames.size() && !frames[from].program) ++from;
    return from;
  };
  // The library's frame the program called into: the outermost named one in [from, to).
  auto entry = [&](size_t from, size_t to) -> const NativeFrame* {
    for (size_t i = to; i-- > from;) {
      if (!frames[i].function.empty()) return &frames[i];
    }
    return nullptr;
  };
  std::vector<NativeFrame> hot;
  size_t own = next_program(0);
  if (own == frames.size()) {
    // No frame of the program's: the innermost named one.
    for (const NativeFrame& frame : frames) {
      if (frame.function.empty()) continue;
      hot.push_back(frame);
      break;
    }
    return hot;
  }
  if (own > 0) {
    if (const NativeFrame* called = entry(0, own)) hot.push_back(*called);
    hot.push_back(frames[own]);
    return hot;
  }
  hot.push_back(frames[0]);
  size_t caller = next_program(1);
  if (caller == frames.size()) return hot;
  if (const NativeFrame* called_back = entry(1, caller)) hot.push_back(*called_back);
  hot.push_back(frames[caller]);
  return hot;
}

// Samples are counted by their frames' functions; the source lines vary inside a loop.
std::vector<std::string> KeyOf(const std::vector<NativeFrame>& frames) {
  std::vector<std::string> key;
  for (const NativeFrame& frame : frames) key.push_back(frame.function + "@" + frame.module);
  return key;
}

std::vector<std::string> LinesOf(const std::vector<NativeFrame>& frames) {
  std::vector<std::string> lines;
  for (const NativeFrame& frame : frames) lines.push_back(frame.source);
  return lines;
}

}  // namespace

OnCpuActivity WhatRanOnCpu(const Session& session, uint32_t tid, uint64_t start_ns,
                           uint64_t end_ns) {
  OnCpuActivity activity;
  std::span<const NativeSample> samples = session.native.Samples(tid, start_ns, end_ns);
  activity.native_total = static_cast<uint32_t>(samples.size());
  // Counted by function (and module), each stack named once; the source line shown is the most
  // common of the function's (a loop's lines vary, a call site's does not).
  struct Count {
    uint32_t samples = 0;
    // By the frames' source lines: the frames and their samples.
    std::map<std::vector<std::string>, std::pair<uint32_t, std::vector<NativeFrame>>> lines;
  };
  std::map<std::vector<std::string>, Count> counts;
  std::map<uint32_t, std::vector<NativeFrame>> named;  // by stack
  for (const NativeSample& sample : samples) {
    auto [it, inserted] = named.try_emplace(sample.stack);
    if (inserted) it->second = HotFrames(session, session.native.StackOf(sample));
    if (it->second.empty()) continue;
    Count& count = counts[KeyOf(it->second)];
    ++count.samples;
    auto& line = count.lines[LinesOf(it->second)];
    if (line.first++ == 0) line.second = it->second;
  }
  for (const auto& [key, count] : counts) {
    if (count.samples <= activity.native_samples) continue;
    activity.native_samples = count.samples;
    uint32_t most = 0;
    for (const auto& [lines, line] : count.lines) {
      if (line.first <= most) continue;
      most = line.first;
      activity.frames = line.second;
    }
  }

  std::vector<const PythonStack*> python = session.python.Samples(tid, start_ns, end_ns);
  activity.python_total = static_cast<uint32_t>(python.size());
  std::map<std::pair<std::string, int>, std::pair<uint32_t, PythonFrame>> frames;
  for (const PythonStack* stack : python) {
    ResolvedPythonStack resolved = ResolvePythonStack(session, *stack);
    const PythonFrame* chosen = nullptr;
    for (const PythonFrame& frame : resolved.frames) {
      if (IsProgramFrame(frame)) {
        chosen = &frame;
        break;
      }
    }
    if (chosen == nullptr && !resolved.frames.empty()) chosen = &resolved.frames.front();
    if (chosen == nullptr || !chosen->named) continue;
    auto& [count, frame] = frames[{chosen->file + ":" + chosen->function, chosen->line.value_or(0)}];
    if (count++ == 0) frame = *chosen;
  }
  for (const auto& [key, entry] : frames) {
    if (entry.first > activity.python_samples) {
      activity.python_samples = entry.first;
      activity.python = entry.second;
    }
  }
  return activity;
}

}  // namespace gprof::collector
