#include "collector/writers/words/dump_words.h"

#include <linux/futex.h>

#include <cinttypes>
#include <cstdio>
#include <map>

#include "collector/writers/words/lines.h"
#include "collector/model/value_format.h"
#include "collector/writers/words/names.h"

namespace gprof::collector {

std::string FutexOperation(uint64_t op) {
  static const std::map<unsigned, const char*> kNames = {
      {FUTEX_WAIT, "FUTEX_WAIT"},         {FUTEX_WAKE, "FUTEX_WAKE"},
      {FUTEX_LOCK_PI, "FUTEX_LOCK_PI"},   {FUTEX_WAIT_BITSET, "FUTEX_WAIT_BITSET"},
      {FUTEX_LOCK_PI2, "FUTEX_LOCK_PI2"}, {FUTEX_WAIT_REQUEUE_PI, "FUTEX_WAIT_REQUEUE_PI"}};
  unsigned command = static_cast<unsigned>(op) & FUTEX_CMD_MASK;
  auto found = kNames.find(command);
  std::string name = found != kNames.end() ? found->second : "op " + std::to_string(command);
  if (op & FUTEX_PRIVATE_FLAG) name += "_PRIVATE";
  return name;
}

const char* StateWord(char state) {
  switch (state) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "in uninterruptible sleep";
    case 'T':
      return "stopped";
    case 't':
      return "stopped by a tracer";
    case 'Z':
      return "a zombie";
    default:
      return "in an unknown state";
  }
}

const char* HolderSourceWords(live::HolderSource source) {
  switch (source) {
    case live::HolderSource::kNone:
      return "";
    case live::HolderSource::kMutexOwnerField:
      return "from the mutex's owner field";
    case live::HolderSource::kPiFutexWord:
      return "from the PI futex word's owner bits";
    case live::HolderSource::kFileLock:
      return "from /proc/locks";
    case live::HolderSource::kRwlockWriter:
      return "from the rwlock's writer field";
    case live::HolderSource::kGilLastHolder:
      return "from the GIL's locked and last_holder fields";
    case live::HolderSource::kRlockOwner:
      return "from the RLock's owner field";
    case live::HolderSource::kInsideWithBlock:
      return "inferred: the one thread inside `with` on it; a threading.Lock keeps no owner";
    case live::HolderSource::kInsideCudaDriver:
      return "inferred: the one thread working inside the CUDA driver, on a CPU or in an ioctl";
  }
  return "";
}

std::string HolderWords(const std::string& holder, live::HolderSource source,
                        const std::string& note) {
  std::string who = source == live::HolderSource::kFileLock ? "process " + holder : holder;
  return "held by " + who + " (" + HolderSourceWords(source) + (note.empty() ? "" : "; " + note) +
         ")";
}

std::string HolderUnknownWords(const std::string& why) { return "holder unknown: " + why; }

// "stopped 0 us" when every stack was read without a stop; else how long, in all, and how many.
std::string StoppedWords(uint64_t stopped_ns, size_t threads) {
  if (threads == 0) return "stopped 0 us: no thread was stopped";
  return "stopped " + std::to_string((stopped_ns + 500) / 1000) +
         " us in all: " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
         " stopped briefly (ptrace) to read a native stack";
}

std::string StackPathWords(const live::ThreadSnapshot& thread) {
  if (thread.stack_path == live::StackPath::kStopped)
    return "stopped " + std::to_string((thread.stopped_ns + 500) / 1000) + " us to read it";
  return "read without stopping it";
}

std::string DescribeWait(const live::ThreadSnapshot& thread) {
  if (thread.running) return "running on a CPU";
  if (!thread.syscall_unreadable.empty())
    return "an unknown system call (/proc/.../syscall: " + thread.syscall_unreadable + ")";
  if (!thread.in_syscall) return std::string("user space (") + StateWord(thread.state) + ")";
  std::string name = live::SystemCallName(thread.syscall);
  if (name.empty()) name = "system call " + std::to_string(thread.syscall);
  if (thread.syscall == live::kFutexSystemCall) {
    std::string words = "futex " + FormatHex(thread.args[0]) + " " + FutexOperation(thread.args[1]);
    if (thread.futex_word) words += " (word " + std::to_string(*thread.futex_word) + ")";
    if (!thread.lock_name.empty())
      return thread.lock_name + " at " + FormatHex(thread.lock_address) + " (" + words + ")";
    return words;
  }
  if (!thread.object.empty())
    return name + " fd " + std::to_string(static_cast<int>(thread.args[0])) + " (" +
           PrintableName(thread.object) + ")";
  return name;
}

std::vector<std::string> NativeStackLines(const live::Snapshot& snapshot,
                                          const live::ThreadSnapshot& thread) {
  const NativeStack& stack = thread.native_stack;
  std::vector<std::string> lines = FoldedFrameLines(
      ResolveStack(snapshot.maps, static_cast<uint32_t>(thread.pid), stack.ips, nullptr, kLatest));
  if (!stack.cut_short.empty()) lines.push_back("... (" + stack.cut_short + ")");
  return lines;
}

std::string PythonFrameText(const live::PythonFrameLine& frame) {
  return PrintableName(frame.file) + ":" +
         (frame.line > 0 ? std::to_string(frame.line) : std::string("?")) + " " +
         PrintableName(frame.function);
}

}  // namespace gprof::collector
