#include "collector/writers/words/names.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "collector/symbols/user_symbols.h"

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

std::string CountOf(size_t count, std::string_view word) {
  const bool es = word.ends_with("s");  // "process", "processes"
  return std::to_string(count) + " " + std::string(word) + (count == 1 ? "" : es ? "es" : "s");
}

std::string QuotedThread(const Session& session, uint32_t tid) {
  // ThreadName: Python's name for the thread where the kernel's is the interpreter's.
  const std::string name = session.ThreadName(tid);
  if (name.empty()) return std::to_string(tid) + session.OfProcess(tid);
  const std::string native = session.NativeNameBeside(tid);
  return "\"" + name + "\" (" + (native.empty() ? "" : native + ", ") + std::to_string(tid) + ")" +
         session.OfProcess(tid);
}

}  // namespace gprof::collector
