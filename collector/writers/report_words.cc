#include "collector/writers/report_words.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "collector/symbols/user_symbols.h"
#include "collector/writers/report_format.h"

namespace gprof::collector {
namespace {

bool IsIdentifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}

void ReplaceAll(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// Removes every "<open>...]" (" [clone .constprop.0]", "[abi:cxx11]").
void RemoveBracketed(std::string& text, std::string_view open) {
  for (size_t at = text.find(open); at != std::string::npos; at = text.find(open, at)) {
    size_t end = text.find(']', at + open.size());
    if (end == std::string::npos) break;
    text.erase(at, end + 1 - at);
  }
}

// The index past the group that opens at `at` (a '(' or '{'), nested groups of both kinds
// included; text.size() when it never closes.
size_t SkipGroup(std::string_view text, size_t at) {
  int depth = 0;
  for (size_t i = at; i < text.size(); ++i) {
    if (text[i] == '(' || text[i] == '{') ++depth;
    if (text[i] == ')' || text[i] == '}') {
      if (--depth == 0) return i + 1;
    }
  }
  return text.size();
}

// After a parameter list: " const", " &&", " noexcept"... (a member function's qualifiers).
size_t SkipQualifiers(std::string_view text, size_t at) {
  static constexpr std::array<std::string_view, 6> kQualifiers = {
      " const", " volatile", " &&", " &", " noexcept", " throw()"};
  for (bool found = true; found;) {
    found = false;
    for (std::string_view qualifier : kQualifiers) {
      if (text.substr(at).starts_with(qualifier)) {
        at += qualifier.size();
        found = true;
      }
    }
  }
  return at;
}

// The characters an operator's name may have after "operator" ("<<", "()", "[]", "->*").
bool IsOperatorChar(char c) {
  return std::string_view("<>=!+-*/%^&|~[],").find(c) != std::string::npos;
}

}  // namespace

std::string ShortCppName(std::string_view name) {
  std::string text(name);
  RemoveBracketed(text, " [clone ");
  RemoveBracketed(text, "[clone ");
  RemoveBracketed(text, "[abi:");
  ReplaceAll(text,
             "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >",
             "std::string");
  ReplaceAll(text, "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
             "std::string");
  ReplaceAll(text, "std::__cxx11::", "std::");
  ReplaceAll(text, "(anonymous namespace)", "{anon}");

  std::string out;
  out.reserve(text.size());
  int angle = 0;           // template argument depth
  bool signature = false;  // a parameter list was dropped: the name is a function's signature
  bool in_brace = false;   // inside "{lambda()#1}", "{anon}"
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (text.compare(i, 8, "operator") == 0 && (i == 0 || !IsIdentifierChar(text[i - 1])) &&
        (i + 8 == text.size() || !IsIdentifierChar(text[i + 8]))) {
      size_t end = i + 8;
      if (text.compare(end, 2, "()") == 0) {
        end += 2;
      } else {
        while (end < text.size() && IsOperatorChar(text[end])) ++end;
      }
      if (angle < 2) out.append(text, i, end - i);
      i = end;
      continue;
    }
    if (in_brace) {
      if (c == '(') {
        i = SkipGroup(text, i);  // "{lambda(int)#1}" -> "{lambda#1}"
        continue;
      }
      if (c == '}') in_brace = false;
      if (angle < 2) out += c;
      ++i;
      continue;
    }
    switch (c) {
      case '{':
        in_brace = true;
        if (angle < 2) out += c;
        ++i;
        continue;
      case '<':
        ++angle;
        if (angle == 1) out += '<';
        if (angle == 2) out += "<...";
        ++i;
        continue;
      case '>':
        if (angle == 1 || angle == 2) out += '>';
        if (angle > 0) --angle;
        ++i;
        continue;
      case '(':
        // A parameter list (of the function, or of one named in a template argument); a function
        // type's "(int)" inside template arguments ("std::function<void (int)>") stays.
        if (angle == 0 || (i > 0 && (IsIdentifierChar(text[i - 1]) || text[i - 1] == '>'))) {
          i = SkipQualifiers(text, SkipGroup(text, i));
          signature = true;
          continue;
        }
        break;
      default:
        break;
    }
    if (angle < 2) out += c;
    ++i;
  }
  // A template function's demangled name leads with its return type: "unsigned long ns::f<...>".
  // What follows the last space outside template arguments and braces is the name ("operator new"
  // keeps its space).
  if (signature) {
    int depth = 0;
    size_t cut = std::string::npos;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out.compare(i, 8, "operator") == 0 && (i == 0 || !IsIdentifierChar(out[i - 1]))) {
        i += 8;  // its "<<" and the space after it are part of the name
        while (i < out.size() && IsOperatorChar(out[i])) ++i;
        if (i < out.size() && out[i] != ' ') --i;
        continue;
      }
      char c = out[i];
      if (c == '<' || c == '{') ++depth;
      if ((c == '>' || c == '}') && depth > 0) --depth;
      if (c == ' ' && depth == 0 && i + 1 < out.size()) cut = i;
    }
    if (cut != std::string::npos) out.erase(0, cut + 1);
  }
  return out.empty() ? std::string(name) : out;
}

std::string ShortFrame(std::string_view frame) {
  size_t plus = frame.rfind("+0x");
  if (plus == std::string_view::npos || plus == 0) return ShortCppName(frame);
  std::string_view offset = frame.substr(plus + 3);
  if (offset.empty() ||
      !std::all_of(offset.begin(), offset.end(), [](char c) { return std::isxdigit(c); }))
    return ShortCppName(frame);
  return ShortCppName(frame.substr(0, plus)) + std::string(frame.substr(plus));
}

std::string ReasonInWords(std::string_view function) {
  // The first whose part the function's name contains: more specific parts come first.
  static constexpr std::pair<std::string_view, std::string_view> kWords[] = {
      {"futex", "waiting on a futex"},
      {"nanosleep", "asleep in nanosleep"},
      {"pipe_read", "reading a pipe"},
      {"pipe_write", "writing a pipe"},
      {"n_tty_read", "reading a terminal"},
      {"unix_stream_read", "reading a socket"},
      {"unix_stream_recv", "reading a socket"},
      {"sk_wait_data", "reading a socket"},
      {"tcp_recvmsg", "reading a socket"},
      {"skb_recv", "reading a socket"},
      {"sk_stream_wait", "writing a socket"},
      {"sock_alloc_send", "writing a socket"},
      {"inet_csk_accept", "waiting for a connection"},
      {"unix_wait_for_peer", "writing a socket"},
      {"eventfd_read", "reading an eventfd"},
      {"inotify_read", "waiting for file events"},
      {"ep_poll", "waiting in epoll_wait"},
      {"epoll", "waiting in epoll_wait"},
      {"do_poll", "waiting in poll"},
      {"do_sys_poll", "waiting in poll"},
      {"do_select", "waiting in select"},
      {"core_sys_select", "waiting in select"},
      {"kernel_wait4", "waiting for a child to exit"},
      {"do_wait", "waiting for a child to exit"},
      {"sigsuspend", "waiting for a signal"},
      {"sigtimedwait", "waiting for a signal"},
      {"do_sys_pause", "waiting for a signal"},
      {"do_signal_stop", "stopped by a signal"},
      {"ptrace_stop", "stopped by a debugger"},
      {"io_schedule", "waiting for disk I/O"},
      {"folio_wait", "waiting for disk I/O"},
      {"wait_on_page", "waiting for disk I/O"},
      {"bit_wait_io", "waiting for disk I/O"},
      {"blk", "waiting for disk I/O"},
      {"rwsem", "waiting for a kernel lock"},
      {"mutex_lock", "waiting for a kernel lock"},
      {"rt_mutex", "waiting for a kernel lock"},
      {"wait_for_completion", "waiting for the kernel to finish a request"},
      {"schedule_timeout", "asleep with a timeout"},
      {"msleep", "asleep in the kernel"},
      {"do_exit", "exiting"},
      {"exit_to_user_mode", "preempted"},
      {"irqentry_exit", "preempted"},
      {"preempt_schedule", "preempted"},
  };
  for (const auto& [part, words] : kWords) {
    if (function.find(part) != std::string_view::npos) return std::string(words);
  }
  return {};
}

std::string QuotedThread(const Session& session, uint32_t tid) {
  // ThreadName: Python's name for the thread where the kernel's is the interpreter's.
  const std::string name = session.ThreadName(tid);
  if (name.empty()) return std::to_string(tid) + session.OfProcess(tid);
  const std::string native = session.NativeNameBeside(tid);
  return "\"" + name + "\" (" + (native.empty() ? "" : native + ", ") + std::to_string(tid) + ")" +
         session.OfProcess(tid);
}

std::string ObjectWords(const Session& session, const WaitObject& object, const LockUsers* users) {
  switch (object.kind) {
    case WaitKind::kFutex: {
      UserLocation where =
          LocateUserAddress(session, object.pid, object.address, object.seen_ns, AddressUse::kData);
      if (!where.symbol.empty()) {
        std::string text = ShortCppName(where.symbol);
        if (where.symbol_offset != 0) text += "+" + FormatHex(where.symbol_offset);
        return text + " in " + where.module;
      }
      std::string text = "futex " + FormatHex(object.address);
      if (!where.section.empty())
        return text + " (" + where.section + "+" + FormatHex(where.section_offset) + ") in " +
               where.module;
      std::string memory = where.module == "[heap]"             ? "on the heap"
                           : where.module.starts_with("[stack") ? "on a stack"
                           : where.module == "anonymous memory" ? "in anonymous memory"
                                                                : "";
      if (!memory.empty() && users != nullptr) {
        auto user = users->find({object.pid, object.address});
        if (user != users->end() && !user->second.python.empty()) return user->second.python;
        if (user != users->end() && !user->second.library.empty())
          return "a lock inside " + user->second.library + " (" + text + " " + memory + ")";
      }
      if (!memory.empty()) return text + " " + memory;
      if (!where.module.empty()) return text + " in " + where.module;
      return text;
    }
    case WaitKind::kKernelFunction: {
      std::string words = ReasonInWords(object.kernel_function);
      if (!words.empty()) return words;
      break;
    }
    default:
      break;
  }
  WaitObject plain = object;
  plain.kernel_function.clear();  // said by the kind, kept in report.json
  return DescribeWaitObject(session, object.kind == WaitKind::kKernelFunction ? object : plain);
}

std::string WaitWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                      const LockUsers* users) {
  switch (object.kind) {
    case WaitKind::kFutex:
      switch (wait_class) {
        case WaitClass::kUserLock: {
          std::string words = ObjectWords(session, object, users);
          return (words.starts_with("a lock ") ? "waiting for " : "waiting for lock ") + words;
        }
        case WaitClass::kPythonGil:
          return "waiting for the GIL (" + ObjectWords(session, object, users) + ")";
        case WaitClass::kCondition:
          return "waiting on " + ObjectWords(session, object, users);
        default:
          return "waiting on " + ObjectWords(session, object, users);
      }
    case WaitKind::kKernelLock:
      return "waiting for " + ObjectWords(session, object, users);
    case WaitKind::kDevice:
    case WaitKind::kPageFault:
      return "in " + ObjectWords(session, object, users);
    case WaitKind::kKernelFunction:
      if (std::string words = ReasonInWords(object.kernel_function); !words.empty()) return words;
      if (object.kernel_function.empty()) return "asleep";
      return "asleep in the kernel's " + object.kernel_function;
  }
  return "asleep";
}

std::string SleptWords(const Session& session, const WaitObject& object, WaitClass wait_class,
                       uint64_t asleep_ns, const LockUsers* users) {
  std::string words = WaitWords(session, object, wait_class, users);
  std::string text = "asleep " + FormatDuration(asleep_ns);
  if (words == "asleep") return text;
  if (words.starts_with("asleep ")) return text + words.substr(6);
  return text + " " + words;
}

std::vector<StackFrame> ResolveStack(const Session& session, uint32_t pid,
                                     const std::vector<uint64_t>& ips,
                                     const std::vector<std::string>* symbols, uint64_t time_ns) {
  std::vector<StackFrame> frames;
  frames.reserve(ips.size());
  auto process = session.processes.find(pid);
  for (size_t i = 0; i < ips.size(); ++i) {
    StackFrame frame;
    frame.address = ips[i];
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    UserLocation location = LocateUserAddress(session, pid, ips[i], time_ns, use);
    frame.module = location.module;
    const Mapping* mapping = nullptr;
    const MapsSnapshot* maps = nullptr;
    if (process != session.processes.end()) {
      maps = process->second.MapsHolding(ips[i], time_ns);
      if (maps != nullptr) mapping = maps->Find(ips[i]);
    }
    // Junk only where the maps say so: a process whose maps were not recorded, or a frame the
    // injected library's unwinder named, is taken as it is.
    const bool named = symbols != nullptr && i < symbols->size() && !(*symbols)[i].empty();
    const bool maps_known = process != session.processes.end() && !process->second.maps.empty();
    frame.junk = maps_known && !named &&
                 (mapping == nullptr || mapping->perms.size() < 3 || mapping->perms[2] != 'x');
    if (mapping != nullptr && !mapping->path.empty()) {
      const std::string& exe = process->second.exe;
      // The executable: the process's own, else the first file its maps hold.
      const Mapping* first = nullptr;
      for (const Mapping& m : maps->mappings) {
        if (m.path.starts_with('/')) {
          first = &m;
          break;
        }
      }
      frame.program =
          exe.empty() ? (first != nullptr && first->path == mapping->path) : mapping->path == exe;
    }
    if (symbols != nullptr && i < symbols->size() && !(*symbols)[i].empty()) {
      frame.name = (*symbols)[i];
    } else {
      frame.name = FrameText(location, ips[i]);
    }
    frame.source = location.source;
    frames.push_back(std::move(frame));
  }
  return frames;
}

namespace {

std::string FrameLine(const StackFrame& frame) {
  std::string line = ShortFrame(frame.name);
  // A frame named by its module already says where it is.
  if (!frame.program && !frame.module.empty() && !frame.name.starts_with(frame.module))
    line += " in " + frame.module;
  if (!frame.source.empty()) line += "  at " + frame.source;
  return line;
}

std::string FoldLine(size_t count, const std::vector<std::string>& modules) {
  std::string text = "... " + std::to_string(count) + (count == 1 ? " frame in " : " frames in ");
  for (size_t i = 0; i < modules.size(); ++i) text += (i == 0 ? "" : ", ") + modules[i];
  return text;
}

}  // namespace

std::vector<std::string> FoldedFrameLines(const std::vector<StackFrame>& all) {
  std::vector<const StackFrame*> frames;
  for (const StackFrame& frame : all) {
    if (!frame.junk) frames.push_back(&frame);
  }
  size_t outermost_program = frames.size();
  for (size_t i = frames.size(); i-- > 0;) {
    if (frames[i]->program) {
      outermost_program = i;
      break;
    }
  }
  std::vector<std::string> lines;
  for (size_t i = 0; i < frames.size();) {
    if (outermost_program < frames.size() && i > outermost_program && frames.size() - i > 1) {
      // Past the program's outermost frame: how the thread started, nothing of the program's.
      std::vector<std::string> modules;
      for (size_t j = i; j < frames.size(); ++j) {
        const std::string& module = frames[j]->module.empty() ? "unknown code" : frames[j]->module;
        if (std::find(modules.begin(), modules.end(), module) == modules.end())
          modules.push_back(module);
      }
      lines.push_back(FoldLine(frames.size() - i, modules));
      break;
    }
    if (frames[i]->program) {
      lines.push_back(FrameLine(*frames[i++]));
      continue;
    }
    size_t end = i + 1;
    while (end < frames.size() && !frames[end]->program && frames[end]->module == frames[i]->module)
      ++end;
    // A run of three or more inside one library: where the caller entered it is what it says.
    if (end - i >= 3) {
      lines.push_back(
          FoldLine(end - i - 1, {frames[i]->module.empty() ? "unknown code" : frames[i]->module}));
      lines.push_back(FrameLine(*frames[end - 1]));
    } else {
      for (size_t j = i; j < end; ++j) lines.push_back(FrameLine(*frames[j]));
    }
    i = end;
  }
  return CollapseFrameRepeats(lines);
}

namespace {

// Columns a line takes: its UTF-8 characters.
size_t Columns(std::string_view text) {
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; });
}

// The byte index where `text`'s first `columns` characters end.
size_t ByteOfColumn(std::string_view text, size_t columns) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80 && seen++ == columns) return i;
  }
  return text.size();
}

void FitLine(std::string_view line, size_t width, std::string& out) {
  size_t indent = line.find_first_not_of(' ');
  if (indent == std::string_view::npos) indent = 0;
  std::string continuation(std::min(indent + 4, width / 2), ' ');
  std::string_view rest = line;
  bool first = true;
  while (true) {
    std::string prefix = first ? "" : continuation;
    if (Columns(prefix) + Columns(rest) <= width) {
      out += prefix;
      out += rest;
      out += '\n';
      return;
    }
    size_t room = ByteOfColumn(rest, width - Columns(prefix));
    std::string_view head = rest.substr(0, room);
    size_t skip = first ? indent : 0;
    size_t cut = std::string_view::npos;
    for (std::string_view mark : {"; ", ", ", " "}) {
      size_t at = head.rfind(mark);
      if (at != std::string_view::npos && at > skip) {
        cut = mark == " " ? at : at + 1;  // the line keeps the mark's "," or ";"
        break;
      }
    }
    size_t next = 0;
    if (cut == std::string_view::npos) {
      cut = room;  // one word longer than the line
      next = room;
    } else {
      next = cut;
      while (next < rest.size() && rest[next] == ' ') ++next;
    }
    out += prefix;
    out += rest.substr(0, cut);
    out += '\n';
    rest = rest.substr(next);
    first = false;
    if (rest.empty()) return;
  }
}

}  // namespace

std::string FitLines(std::string_view text, size_t width) {
  std::string out;
  out.reserve(text.size() + text.size() / 32);
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    FitLine(line, width, out);
    if (end == std::string_view::npos) {
      out.pop_back();  // the text had no newline at its end
      break;
    }
    text = text.substr(end + 1);
  }
  return out;
}

}  // namespace gprof::collector
