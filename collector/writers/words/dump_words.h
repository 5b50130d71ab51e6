// The words of `gprof-run dump` (issue 38), shared by its text and JSON: a thread's state, what it
// waits on, a lock's holder and where that was read, how a stack was read and how long threads
// were stopped, a stack's lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collector/live/proc_snapshot.h"

namespace gprof::collector {

// A futex operation: "FUTEX_WAIT_PRIVATE", "FUTEX_LOCK_PI".
std::string FutexOperation(uint64_t op);
// /proc's state letter in words: "sleeping", "running", "in uninterruptible sleep".
const char* StateWord(char state);
// "held by 12 (from the mutex's owner field)", "held by process 40 (from /proc/locks)",
// "held by 12 (from the RLock's owner field; it has taken it 2 times)" with a `note`.
std::string HolderWords(const std::string& holder, live::HolderSource source,
                        const std::string& note = "");
// "holder unknown: WHY", for a known lock whose holder is not.
std::string HolderUnknownWords(const std::string& why);
// Where a holder was read: "from the mutex's owner field"; "" for none.
const char* HolderSourceWords(live::HolderSource source);
// "stopped 0 us: no thread was stopped", "stopped 34 us in all: 1 thread stopped briefly ...".
std::string StoppedWords(uint64_t stopped_ns, size_t threads);
// How a thread's native stack was read: "read without stopping it", "stopped 34 us to read it".
std::string StackPathWords(const live::ThreadSnapshot& thread);
// What `thread` waits on, in words: "futex 0x7f12 FUTEX_WAIT_PRIVATE", "read fd 5 (pipe:[12])",
// "the GIL at 0x7f10 (futex ...)".
std::string DescribeWait(const live::ThreadSnapshot& thread);
// A thread's native stack as the report shows stacks (folded, with source lines), innermost first,
// named through the snapshot's maps; ending with "... (why)" where it was cut short.
std::vector<std::string> NativeStackLines(const live::Snapshot& snapshot,
                                          const live::ThreadSnapshot& thread);
// A Python frame: "train.py:42 step".
std::string PythonFrameText(const live::PythonFrameLine& frame);

}  // namespace gprof::collector
