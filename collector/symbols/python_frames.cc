#include "collector/symbols/python_frames.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "collector/symbols/python_lines.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {
namespace {

// Processes `pid` descends from through forks (no exec in between): they ran the same code
// objects at the same addresses until the fork.
std::vector<uint32_t> ForkAncestors(const Session& session, uint32_t pid) {
  std::vector<uint32_t> chain;
  for (size_t depth = 0; depth < 16; ++depth) {
    auto process = session.processes.find(pid);
    if (process == session.processes.end() || !process->second.exec_ns.empty()) break;
    uint32_t parent = process->second.ppid;
    if (parent == 0 || parent == pid ||
        std::find(chain.begin(), chain.end(), parent) != chain.end())
      break;
    chain.push_back(parent);
    pid = parent;
  }
  return chain;
}

const PythonCode* FindCode(const Session& session, uint32_t pid, const PythonFrameRef& frame,
                           const std::vector<uint32_t>& ancestors) {
  const PythonCode* failed = nullptr;
  auto look = [&](uint32_t in) -> const PythonCode* {
    auto found = session.python.codes.find({in, frame.code, frame.firstlineno, frame.tag});
    if (found == session.python.codes.end()) return nullptr;
    if (found->second.error != 0) {
      if (failed == nullptr) failed = &found->second;
      return nullptr;
    }
    return &found->second;
  };
  if (const PythonCode* code = look(pid)) return code;
  for (uint32_t ancestor : ancestors) {
    if (const PythonCode* code = look(ancestor)) return code;
  }
  return failed;
}

std::string ErrorText(int error) {
  switch (error) {
    case 0:
      return "never read";
    case ESRCH:
      return "not read: the process had exited";
    case EFAULT:
      return "not read: its memory was gone";
    case EINVAL:
      return "not read: it was freed";
    case EPERM:
    case EACCES:
      return "not read: no permission";
    default:
      return "not read";
  }
}

bool IsEvalLoop(std::string_view symbol) { return symbol.starts_with("_PyEval_EvalFrameDefault"); }

}  // namespace

std::string PythonVersionName(uint32_t version_hex) {
  std::string text =
      std::to_string(version_hex >> 24) + "." + std::to_string((version_hex >> 16) & 0xff);
  if ((version_hex & 0xffff) != 0) text += "." + std::to_string((version_hex >> 8) & 0xff);
  return text;
}

ResolvedPythonStack ResolvePythonStack(const Session& session, const PythonStack& stack) {
  ResolvedPythonStack out;
  out.incomplete = stack.incomplete();
  out.truncated = stack.truncated();
  std::vector<uint32_t> ancestors = ForkAncestors(session, stack.pid);
  for (const PythonFrameRef& ref : session.python.FramesOf(stack)) {
    PythonFrame frame;
    frame.code = ref.code;
    frame.offset = ref.offset;
    frame.entry = (ref.flags & GPROF_PY_FRAME_ENTRY) != 0;
    const PythonCode* code = FindCode(session, stack.pid, ref, ancestors);
    if (code != nullptr && code->error == 0) {
      // An offset beyond the code's bytecode is not a frame of this code object: the stack is
      // not trusted from here on.
      if (code->code_bytes != 0 && ref.offset >= static_cast<int64_t>(code->code_bytes)) {
        out.incomplete = true;
        break;
      }
      frame.named = true;
      frame.file = code->filename;
      frame.function = code->name;
      frame.line = PythonLine(code->line_format, code->linetable, ref.firstlineno, ref.offset);
      if (frame.line && *frame.line < 1) frame.line.reset();
    } else {
      frame.error = code != nullptr ? code->error : 0;
    }
    out.frames.push_back(std::move(frame));
  }
  return out;
}

std::string PythonShortPath(const std::string& file) {
  for (const char* top : {"/site-packages/", "/dist-packages/"}) {
    size_t at = file.rfind(top);
    if (at != std::string::npos) return file.substr(at + std::char_traits<char>::length(top));
  }
  // The standard library: ".../lib/python3.11/threading.py"
  size_t lib = file.rfind("/lib/python");
  if (lib != std::string::npos) {
    size_t slash = file.find('/', lib + 11);
    if (slash != std::string::npos) return file.substr(slash + 1);
  }
  return file;
}

bool IsProgramFrame(const PythonFrame& frame) {
  if (!frame.named) return false;
  const std::string& file = frame.file;
  if (file.empty() || file[0] == '<') return false;  // <frozen importlib._bootstrap>, <string>
  return file.find("/site-packages/") == std::string::npos &&
         file.find("/dist-packages/") == std::string::npos &&
         file.find("/lib/python") == std::string::npos;
}

std::string PythonFrameText(const PythonFrame& frame) {
  if (!frame.named) {
    char text[96];
    snprintf(text, sizeof(text), "code object 0x%llx (%s)",
             static_cast<unsigned long long>(frame.code), ErrorText(frame.error).c_str());
    return text;
  }
  std::string where = IsProgramFrame(frame) ? frame.file : PythonShortPath(frame.file);
  return where + ":" + (frame.line ? std::to_string(*frame.line) : "?") + " in " + frame.function;
}

std::vector<std::string> PythonStackLines(const ResolvedPythonStack& stack, size_t max_frames) {
  constexpr size_t kInsideShown = 4;
  std::vector<std::string> lines;
  const std::vector<PythonFrame>& frames = stack.frames;
  size_t first_own = frames.size();
  size_t own = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (!IsProgramFrame(frames[i])) continue;
    if (first_own == frames.size()) first_own = i;
    ++own;
  }
  if (own > 0) {
    size_t shown = 0;
    for (size_t i = first_own; i < frames.size() && shown < max_frames; ++i) {
      if (!IsProgramFrame(frames[i])) continue;
      lines.push_back(PythonFrameText(frames[i]));
      ++shown;
    }
    if (own > shown) lines.push_back("... " + std::to_string(own - shown) + " more of its frames");
    if (first_own > 0) {
      // The library frames the program's innermost one called, outermost first, one a line.
      for (size_t i = 0; i < std::min(first_own, kInsideShown); ++i)
        lines.push_back((i == 0 ? "inside " : "       ") + PythonFrameText(frames[first_own - 1 - i]));
      if (first_own > kInsideShown)
        lines.push_back("       ... " + std::to_string(first_own - kInsideShown) + " more");
    }
  } else {
    for (size_t i = 0; i < std::min(frames.size(), max_frames); ++i)
      lines.push_back(PythonFrameText(frames[i]));
    if (frames.size() > max_frames)
      lines.push_back("... " + std::to_string(frames.size() - max_frames) + " more frames");
  }
  if (stack.incomplete) {
    lines.push_back("(incomplete: the frames outside these could not be read)");
  } else if (stack.truncated) {
    lines.push_back("(truncated: deeper than " + std::to_string(GPROF_PYTHON_MAX_FRAMES) +
                    " frames, the outermost not read)");
  }
  return lines;
}

std::vector<MergeSlot> MergeOrder(const std::vector<std::string_view>& symbols,
                                  const ResolvedPythonStack* python) {
  // The Python frames in runs of the eval loop, each up to an entry frame.
  std::vector<std::vector<const PythonFrame*>> runs;
  if (python != nullptr) {
    runs.emplace_back();
    for (const PythonFrame& frame : python->frames) {
      runs.back().push_back(&frame);
      if (frame.entry) runs.emplace_back();
    }
    if (runs.back().empty()) runs.pop_back();
  }
  std::vector<MergeSlot> order;
  size_t next = 0;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (next < runs.size() && IsEvalLoop(symbols[i])) {
      for (const PythonFrame* frame : runs[next]) order.push_back({i, frame});
      ++next;
      continue;
    }
    order.push_back({i, nullptr});
  }
  for (; next < runs.size(); ++next)
    for (const PythonFrame* frame : runs[next]) order.push_back({symbols.size(), frame});
  return order;
}

namespace {

MergedFrame PythonMergedFrame(const PythonFrame& frame) {
  MergedFrame out;
  out.python = true;
  out.python_frame = frame;
  out.text = PythonFrameText(frame);
  return out;
}

}  // namespace

std::vector<MergedFrame> MergeFrameTexts(const std::vector<std::string>& native,
                                         const ResolvedPythonStack* python) {
  std::vector<MergedFrame> merged;
  for (const MergeSlot& slot : MergeOrder({native.begin(), native.end()}, python)) {
    if (slot.python != nullptr) {
      merged.push_back(PythonMergedFrame(*slot.python));
      continue;
    }
    MergedFrame out;
    out.text = native[slot.native];
    merged.push_back(std::move(out));
  }
  return merged;
}

std::vector<MergedFrame> MergeStacks(const Session& session, uint32_t pid, int32_t stack_id,
                                     uint64_t time_ns, const ResolvedPythonStack* python) {
  std::vector<UserLocation> locations;
  std::vector<uint64_t> ips;
  auto user = stack_id >= 0 ? session.user_stacks.find(stack_id) : session.user_stacks.end();
  if (user != session.user_stacks.end()) {
    for (size_t i = 0; i < user->second.ips.size(); ++i) {
      uint64_t ip = user->second.ips[i];
      const Mapping* mapping = session.FindMapping(pid, ip, time_ns);
      if (mapping == nullptr || mapping->perms.size() < 3 || mapping->perms[2] != 'x') break;
      AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
      locations.push_back(LocateUserAddress(session, pid, ip, time_ns, use));
      ips.push_back(ip);
    }
  }
  std::vector<std::string_view> symbols;
  for (const UserLocation& location : locations) symbols.push_back(location.symbol);
  std::vector<MergedFrame> merged;
  for (const MergeSlot& slot : MergeOrder(symbols, python)) {
    if (slot.python != nullptr) {
      merged.push_back(PythonMergedFrame(*slot.python));
      continue;
    }
    MergedFrame out;
    out.text = FrameText(locations[slot.native], ips[slot.native]);
    out.module = locations[slot.native].module;
    out.address = ips[slot.native];
    merged.push_back(std::move(out));
  }
  return merged;
}

}  // namespace gprof::collector
