#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "collector/analysis/wait_class.h"
#include "collector/symbols/python_frames.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/report.h"
#include "collector/writers/report_tables.h"
#include "collector/writers/report_text.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector::report_text {

void TextReport::NumberEvents() {
  causes_shown_ = std::min(analysis_.causes.size(), kCausesShown);
  for (int f : analysis_.freezes_by_number) freezes_.push_back(&analysis_.freezes[f]);
  freezes_shown_ = std::min(freezes_.size(), options_.max_listed);
  for (size_t i = 0; i < freezes_shown_; ++i) {
    const std::optional<CallsInFreeze>& calls = freezes_[i]->calls;
    if (calls && calls->holder && calls->holder->call != nullptr)
      held_by_[calls->holder->call] = freezes_[i]->number;
  }
}

std::string TextReport::FreezeRefs(const std::vector<int>& freezes) const {
  std::vector<size_t> shown;
  size_t elsewhere = 0;
  for (int index : freezes) {
    size_t number = analysis_.freezes[index].number;
    if (number <= freezes_shown_) {
      shown.push_back(number);
    } else {
      ++elsewhere;
    }
  }
  std::string text = shown.empty() ? "" : NumberList("freeze", "freezes", shown);
  if (elsewhere > 0) {
    text += (text.empty() ? "" : ", ") + std::to_string(elsewhere) +
            (elsewhere == 1 ? " freeze" : " freezes") + " listed in report.json";
  }
  return text;
}

std::string TextReport::CauseWhat(const Cause& cause) const {
  return CauseTitle(session_, analysis_, cause);
}

// The frames, one a line: the first after `first` ("at ", "slept at "), the others under it.
void TextReport::StackLines(const std::vector<StackFrame>& frames, const std::string& indent,
                            const char* first, bool truncated) {
  std::vector<std::string> lines = FoldedFrameLines(frames);
  if (lines.empty()) return;
  if (lines.size() > kStackLinesShown) {
    const size_t more = lines.size() - kStackLinesShown;
    lines.resize(kStackLinesShown);
    lines.push_back("... " + std::to_string(more) + " more (report.json has every frame)");
  } else if (truncated) {
    lines.emplace_back("... (truncated)");
  }
  LabeledLines(lines, indent, first);
}

void TextReport::LabeledLines(const std::vector<std::string>& lines, const std::string& indent,
                              const std::string& first) {
  const std::string under(first.size(), ' ');
  for (size_t i = 0; i < lines.size(); ++i)
    out_ << indent << (i == 0 ? first : under) << lines[i] << "\n";
}

void TextReport::PythonStackAt(const PythonStack* stack, const std::string& indent,
                               const std::string& label) {
  if (stack == nullptr) return;
  LabeledLines(PythonStackLines(ResolvePythonStack(session_, *stack), kPythonFramesShown), indent,
               label);
}

void TextReport::WaitedAt(const Wait& wait, const std::string& indent) {
  if (!waited_told_.contains(&wait)) PythonStackAt(wait.python_stack, indent, "waited at ");
}

void TextReport::RootStack(const ChainLink& root, const std::string& indent) {
  if (root.state == ChainLink::State::kAsleep) {
    if (root.wait) PythonStackAt(root.wait->python_stack, indent, "asleep at ");
    return;
  }
  std::vector<const PythonStack*> samples =
      session_.python.Samples(root.tid, root.start_ns, root.end_ns);
  if (samples.empty()) return;
  const PythonStack* most = nullptr;
  size_t most_count = 0;
  for (const PythonStack* sample : samples) {
    size_t count = std::count_if(samples.begin(), samples.end(), [&](const auto* other) {
      return other->frames == sample->frames;
    });
    if (count > most_count) {
      most = sample;
      most_count = count;
    }
  }
  PythonStackAt(most, indent,
                "running (" + std::to_string(most_count) + " of " + std::to_string(samples.size()) +
                    (samples.size() == 1 ? " sample) " : " samples) "));
}

// The call's native stack, when it was recorded, and its Python stack.
void TextReport::StackLine(const ApiCall& call, const std::string& indent) {
  const NativeStack* stack = session_.CallStackOf(call);
  if (stack != nullptr && !stack->ips.empty()) {
    StackLines(ResolveStack(session_, stack->pid, stack->ips, &stack->symbols, kLatest), indent,
               "at ");
  }
  PythonStackAt(session_.python.CudaCall(call.tid, call.enter_ns), indent, "python ");
}

// Where in user code the thread went to sleep, when the kernel recorder took its user stack, and
// where in Python.
void TextReport::UserStackLine(const Wait& wait, const std::string& indent) {
  auto stack = session_.user_stacks.find(wait.user_stack_id);
  if (wait.user_stack_id >= 0 && stack != session_.user_stacks.end()) {
    std::vector<StackFrame> frames =
        ResolveStack(session_, wait.pid, stack->second.ips, nullptr, wait.start_ns);
    StackLines(frames, indent, "slept at ", stack->second.truncated);
  }
  PythonStackAt(wait.python_stack, indent, "waited at ");
}

// At most kSummaryLines lines: why the GPU went idle and why threads froze, cause by cause.
void TextReport::Summary() {
  std::vector<std::string> lines;
  const GpuSummary& gpu = analysis_.gpu;
  for (const GpuDevice& device : gpu.devices) {
    const uint64_t span_ns = device.last_ns - device.first_ns;
    std::string line = GpuDeviceName(device, gpu.devices) + " ran nothing " +
                       FormatDuration(device.idle_ns()) + " (" +
                       FormatShare(device.idle_ns(), span_ns) + ") of the " +
                       FormatDuration(span_ns) + " from its first work to its last";
    const GapTotals totals = GapTotalsOf(analysis_, device);
    const uint64_t gaps_ns = totals.idle_ns;
    const size_t gaps = totals.gaps;
    if (gaps > 0) {
      line += "; " + FormatDuration(gaps_ns) + " of it in " + std::to_string(gaps) + " gap" +
              (gaps == 1 ? "" : "s") + " of " + FormatDuration(analysis_.options.gap_threshold_ns) +
              " or more (GPU GAPS)";
    }
    lines.push_back(line);
    if (lines.size() >= 3) break;
  }
  if (!freezes_.empty()) {
    uint64_t longest = 0;
    size_t threads = 0;
    longest = freezes_.front()->end_ns - freezes_.front()->start_ns;
    threads = freezes_.front()->tids.size();
    lines.push_back("Threads froze together " + std::to_string(freezes_.size()) +
                    (freezes_.size() == 1 ? " time" : " times") +
                    " (blocked at once on one object); the longest, freeze 1, " +
                    FormatDuration(longest) + " with " + std::to_string(threads) + " threads");
  }
  if (!session_.api_calls.empty()) {
    const size_t in_freezes = SlowCallsInFreezes(analysis_);
    std::string line = WithThousands(analysis_.blocked_calls.size()) + " CUDA call" +
                       (analysis_.blocked_calls.size() == 1 ? "" : "s") + " took " +
                       FormatDuration(analysis_.options.threshold_ns) + " or longer";
    if (in_freezes > 0) line += ", " + WithThousands(in_freezes) + " of them in freezes";
    lines.push_back(line);
  }
  if (!analysis_.causes.empty()) {
    lines.push_back(std::string("Causes, ranked by ") +
                    (AnyGpu() ? "the GPU idle time they explain, then by " : "") +
                    "the thread time they blocked (CAUSES below):");
    const size_t room =
        kSummaryLines - 1 - lines.size() - (causes_shown_ < analysis_.causes.size());
    size_t listed = std::min(causes_shown_, room);
    for (size_t i = 0; i < listed; ++i) {
      const Cause& cause = analysis_.causes[i];
      std::string line = "  " + std::to_string(cause.number) + ". [" + ClassOf(cause) + "] " +
                         CauseWhat(cause) + ":";
      std::vector<std::string> facts;
      if (cause.gpu_idle_ns > 0) facts.push_back("GPU idle " + FormatDuration(cause.gpu_idle_ns));
      if (cause.kind == CauseKind::kHandoff) {
        facts.push_back(std::to_string(cause.wait_count) +
                        (cause.wait_count == 1 ? " wait" : " waits") + " held up the program " +
                        FormatDuration(cause.blocked_ns));
      } else if (cause.wait_count > 0) {
        facts.push_back(std::to_string(cause.tids.size()) +
                        (cause.tids.size() == 1 ? " thread " : " threads ") +
                        (cause.wait_class == WaitClass::kCpu ? "runnable " : "blocked ") +
                        FormatDuration(cause.blocked_ns));
      }
      if (!cause.freezes.empty()) facts.push_back(FreezeRefs(cause.freezes));
      if (cause.holder_tid != 0 && cause.wait_class != WaitClass::kCpu &&
          cause.kind != CauseKind::kHandoff)
        facts.push_back("held by " + Thread(cause.holder_tid));
      if (cause.root) {
        switch (cause.root->state) {
          case ChainLink::State::kRunnable:
            facts.push_back("root waiting for a CPU");
            break;
          case ChainLink::State::kGpu:
            facts.push_back("root waiting for the GPU");
            break;
          case ChainLink::State::kAsleep:
            if (cause.root->wait)
              facts.push_back("root " + WaitWords(session_, cause.root->wait->object,
                                                  cause.root->wait_class, LockNames()));
            break;
          case ChainLink::State::kOnCpu:
            // A handoff's root is often not the thread that ended the waits: name it.
            facts.push_back(cause.kind != CauseKind::kHandoff || cause.root->tid == cause.holder_tid
                                ? "root on CPU"
                                : "root " + Thread(cause.root->tid) + " on CPU");
            break;
          case ChainLink::State::kExited:
            break;
        }
      }
      for (size_t f = 0; f < facts.size(); ++f) line += (f == 0 ? " " : "; ") + facts[f];
      lines.push_back(line);
    }
    if (listed < analysis_.causes.size()) {
      lines.push_back("  ... " + std::to_string(analysis_.causes.size() - listed) + " more: " +
                      (listed < causes_shown_ ? "CAUSES below, " : "") + "all in report.json");
    }
  } else if (analysis_.kernel_recorded) {
    lines.push_back("No contention explains a wait: see CAUSES.");
  }
  if (lines.empty()) return;
  out_ << "\nSUMMARY\n";
  for (const std::string& line : lines) out_ << OneLine("  " + line) << "\n";
}

std::string TextReport::CpuWaits(bool delayed) const {
  constexpr size_t kShown = 4;
  std::vector<const CpuWait*> listed;
  if (delayed) {
    listed = DelayedByCpu(analysis_);
  } else {
    for (const CpuWait& wait : analysis_.cpu_waits) {
      if (wait.short_of_cpu) listed.push_back(&wait);
    }
  }
  std::string text;
  for (size_t i = 0; i < std::min(kShown, listed.size()); ++i) {
    const CpuWait& wait = *listed[i];
    // Delayed: one thread a line, each line under the heading.
    const char* separator = delayed ? "\n       " : i == 0 ? "" : ", ";
    text += separator + Thread(wait.tid) + " " +
            FormatDuration(delayed ? wait.delayed_ns() : wait.runnable_ns);
    if (!delayed) continue;
    std::vector<std::string> how;
    if (wait.after_wakeup_ns > 0) {
      how.push_back("woken, it waited for a CPU " + FormatDuration(wait.after_wakeup_ns) + " (" +
                    std::to_string(wait.wakeups) + " wakeup" + (wait.wakeups == 1 ? "" : "s") +
                    ", longest " + FormatDuration(wait.longest_after_wakeup_ns) + ")");
    }
    if (wait.held_up_ns > 0) {
      std::string by =
          "those it waited for were runnable " + FormatDuration(wait.held_up_ns) + " (";
      for (size_t b = 0; b < std::min<size_t>(3, wait.held_up_by.size()); ++b)
        by += (b == 0 ? "" : ", ") + Thread(wait.held_up_by[b].first);
      if (wait.held_up_by.size() > 3)
        by += " and " + std::to_string(wait.held_up_by.size() - 3) + " more";
      how.push_back(by + ")");
    }
    text += ": ";
    for (size_t h = 0; h < how.size(); ++h) text += (h == 0 ? "" : ", ") + how[h];
  }
  if (listed.size() > kShown)
    text += std::string(delayed ? "\n       and " : " and ") +
            std::to_string(listed.size() - kShown) + " more";
  return text;
}

// "ended by X asleep 3 ms, waiting for lock L" and each next link on its own line, the root marked;
// each link with the Python stack it had when it ended the wait before it, the root with what it
// was running.
void TextReport::Chain(const std::vector<ChainLink>& chain, const char* indent,
                       uint32_t deadlock_tid, const Wait* first) {
  const std::string under = std::string(indent) + "    ";
  const Wait* previous = first;
  for (size_t i = 0; i < chain.size(); ++i) {
    // The first link's step under the wait it ended, the others indented under it.
    const bool under_first = chain[i].creator || i > 0;
    out_ << indent << (under_first ? "  " : "") << ChainStepWords(chain[i], i == 0) << " "
         << DescribeLink(session_, chain[i], LockNames());
    if (i + 1 == chain.size()) out_ << (deadlock_tid != 0 ? "" : "  <- root");
    out_ << "\n";
    // A waker's stack at the wakeup is where it released the previous link.
    if (previous != nullptr && !chain[i].creator && previous->waker_tid == chain[i].tid &&
        !released_told_.contains(previous)) {
      PythonStackAt(previous->waker_python_stack, under, "released at ");
      // Native code's release, where no Python frame says it: the unwound stack of the wakeup.
      const NativeStack* native = previous->waker_native_stack;
      if (previous->waker_python_stack == nullptr && native != nullptr && !native->ips.empty())
        StackLines(ResolveStack(session_, native->pid, native->ips, nullptr, native->time_ns),
                   under, "released at ");
    }
    if (i + 1 == chain.size() && deadlock_tid == 0) RootStack(chain[i], under);
    previous = chain[i].wait ? &*chain[i].wait : nullptr;
  }
  if (deadlock_tid != 0) {
    out_ << indent << "  who waited for a lock held by " << Thread(deadlock_tid)
         << "  <- DEADLOCK: the waits form a cycle\n";
  }
}

// Each cause the summary ranked, with what it explains; the freezes and gaps it caused are
// referred to by number.
void TextReport::Causes() {
  out_ << "\nCAUSES\n";
  if (!analysis_.kernel_recorded && session_.meta.known) {
    out_ << "  the kernel was not recorded: waits cannot be explained (run as root, or give "
            "gprof-run CAP_BPF and CAP_PERFMON)\n";
  } else if (!analysis_.kernel_recorded) {
    out_ << "  the kernel was not recorded (no kernel.gpr): waits cannot be explained\n";
  }
  if (std::string cost = DescribeProfilerCost(session_, analysis_); !cost.empty())
    out_ << "  " << cost << "\n";
  for (size_t i = 0; i < causes_shown_; ++i) {
    const Cause& cause = analysis_.causes[i];
    out_ << "  cause " << cause.number << " [" << ClassOf(cause) << "] " << CauseWhat(cause)
         << "\n";
    if (cause.kind == CauseKind::kHandoff) {
      out_ << "     on " << ObjectWords(session_, cause.object, LockNames()) << " ["
           << WaitClassName(cause.wait_class) << "]\n";
    }
    RangesLine(cause.nvtx_ranges, "     ");
    std::vector<std::string> facts;
    if (cause.gpu_idle_ns > 0) facts.push_back(CauseGpuIdleWords(cause));
    if (cause.kind == CauseKind::kHandoff) {
      facts.push_back("held up the program " + FormatDuration(cause.blocked_ns) + " in " +
                      std::to_string(cause.wait_count) + " wait" +
                      (cause.wait_count == 1 ? "" : "s") + " on its critical path (longest " +
                      FormatDuration(cause.longest_ns) + "): " + Threads(cause.tids));
    } else if (cause.wait_count > 0) {
      facts.push_back(
          CauseBlockedWords(cause) + ": " +
          (cause.wait_class == WaitClass::kCpu ? CpuWaits(false) : Threads(cause.tids)));
    }
    for (size_t f = 0; f < facts.size(); ++f) out_ << (f == 0 ? "     " : "; ") << facts[f];
    if (!facts.empty()) out_ << "\n";
    if (cause.kind != CauseKind::kHandoff && cause.held_up_ns > 0)
      out_ << "     " << CriticalPathWords(cause) << "\n";
    if (cause.wait_class == WaitClass::kCpu) {
      if (std::string delayed = CpuWaits(true); !delayed.empty())
        out_ << "     waits held up for want of a CPU:" << delayed << "\n";
    }
    if (cause.holder_tid != 0 && cause.wait_class != WaitClass::kCpu)
      out_ << (cause.kind == CauseKind::kHandoff ? "     ended by " : "     held by ")
           << Thread(cause.holder_tid) << "\n";
    // Where its longest wait waited, and where the holder released the one the analysis chose.
    if (cause.longest_stall >= 0) {
      const Stall* longest = &analysis_.stalls[cause.longest_stall];
      const Stall* released = &analysis_.stalls[cause.told_release];
      if (longest->wait.python_stack != nullptr) waited_told_.insert(&longest->wait);
      PythonStackAt(longest->wait.python_stack, "     ", "waited at   ");
      if (released->wait.waker_python_stack != nullptr) released_told_.insert(&released->wait);
      PythonStackAt(released->wait.waker_python_stack, "     ",
                    released->wait.waker_tid == cause.holder_tid
                        ? "released at "
                        : "woken at    ");  // by another waiter passing it on
    }
    for (int s : cause.stalls) {
      const Stall& stall = analysis_.stalls[s];
      if (!InDeadlock(stall)) continue;
      out_ << "     DEADLOCK: " << DescribeDeadlock(session_, stall) << "\n";
      break;
    }
    if (cause.root) {
      out_ << "     root: " << DescribeLink(session_, *cause.root, LockNames()) << "\n";
      RootStack(*cause.root, "           ");
    }
    if (!cause.freezes.empty()) out_ << "     froze: " << FreezeRefs(cause.freezes) << "\n";
  }
  if (analysis_.causes.empty() && analysis_.kernel_recorded) {
    out_ << "  no contention: no thread waited " << FormatDuration(analysis_.options.threshold_ns)
         << " or more on a lock, the GIL, the kernel or the GPU driver, ";
    if (analysis_.cpu_waits.empty()) {
      out_ << "no thread lacked a CPU";
    } else {
      // Threads that waited for a CPU, but held no wait up by it.
      out_ << "or on a thread that lacked a CPU\n  waiting for a CPU in all: ";
      for (size_t i = 0; i < std::min<size_t>(4, analysis_.cpu_waits.size()); ++i) {
        const CpuWait& wait = analysis_.cpu_waits[i];
        out_ << (i == 0 ? "" : ", ") << Thread(wait.tid) << " " << FormatDuration(wait.runnable_ns);
        if (wait.life_ns > 0)
          out_ << ", " << wait.runnable_ns * 100 / wait.life_ns << "% of its time";
      }
      if (analysis_.cpu_waits.size() > 4)
        out_ << " and " << analysis_.cpu_waits.size() - 4 << " more";
    }
    if (analysis_.gaps.empty() && AnyGpu()) out_ << ", and no GPU was idle between its work";
    out_ << "\n";
  }
  if (analysis_.causes.size() > causes_shown_)
    out_ << "  ... " << analysis_.causes.size() - causes_shown_ << " more in report.json\n";
}

// Every freeze once, numbered: the threads, the cause, the chain of its longest wait, and for the
// slow CUDA calls among its waits who held the lock and what it and they were doing.
void TextReport::Freezes() {
  if (freezes_.empty()) return;
  out_ << "\nFREEZES: threads blocked at once on one object, longest first\n";
  for (size_t i = 0; i < freezes_shown_; ++i) {
    const Freeze& freeze = *freezes_[i];
    out_ << "\nfreeze " << freeze.number << " at " << FormatOffset(session_, freeze.start_ns)
         << ", " << FormatDuration(freeze.end_ns - freeze.start_ns) << ": ";
    if (freeze.of_stalls()) {
      out_ << Threads(freeze.tids, 6) << "\n";
      RangesLine(freeze.nvtx_ranges, "     ");
      FreezeLines(freeze);
      if (freeze.calls) FreezeDetail(*freeze.calls, false);
    } else {
      const CallsInFreeze& calls = *freeze.calls;
      out_ << calls.thread_count() << " threads blocked on "
           << (calls.object.kind == WaitKind::kFutex || calls.object.kind == WaitKind::kKernelLock
                   ? "one lock"
                   : "one wait")
           << "\n";
      RangesLine(freeze.nvtx_ranges, "     ");
      FreezeDetail(calls, true);
    }
  }
  if (freezes_shown_ < freezes_.size()) {
    out_ << "\n(" << freezes_.size() - freezes_shown_ << " more freezes in report.json)\n";
  }
}

void TextReport::FreezeLines(const Freeze& freeze) {
  if (freeze.cause >= 0) {
    const Cause& cause = analysis_.causes[freeze.cause];
    out_ << "     all waited on " << CauseWhat(cause) << " [" << ClassOf(cause) << "], "
         << CauseRef(freeze.cause) << "\n";
  }
  // The longest wait of the freeze, with its chain.
  if (freeze.longest_stall >= 0) {
    const Stall* longest = &analysis_.stalls[freeze.longest_stall];
    out_ << "     longest: " << Thread(longest->tid) << " asleep "
         << FormatDuration(longest->asleep_ns());
    if (longest->call != nullptr) out_ << " in " << session_.ApiName(*longest->call);
    out_ << "\n";
    WaitedAt(longest->wait, "       ");
    Chain(longest->chain, "       ", longest->deadlock_tid, &longest->wait);
  }
}

void TextReport::FreezeDetail(const CallsInFreeze& freeze, bool with_heading) {
  if (with_heading) {
    out_ << "  on       " << ObjectWords(session_, freeze.object, LockNames());
    if (freeze.object.kind != WaitKind::kKernelLock) out_ << ", pid " << freeze.object.pid;
    out_ << "\n";
  }
  FreezeHolder(freeze);
  const char* label = "  blocked  ";
  for (const FreezeMember& member : freeze.members) {
    const BlockedCall& blocked = analysis_.blocked_calls[member.blocked_call];
    out_ << label << Thread(blocked.call->tid) << " in " << Call(*blocked.call);
    if (member.woken_by_tid != 0) {
      out_ << ", released by " << Thread(member.woken_by_tid);
      if (member.passed_on) out_ << ", who waited on it too and passed it on";
    }
    out_ << "\n             " << Breakdown(blocked) << "\n";
    StackLine(*blocked.call, "             ");
    label = "           ";
  }
}

void TextReport::FreezeHolder(const CallsInFreeze& freeze) {
  if (!freeze.holder) {
    out_ << "  holder   unknown: no recorded thread released the waiters\n";
    return;
  }
  const HolderActivity& holder = *freeze.holder;
  out_ << "  holder   " << Thread(holder.tid) << " held it "
       << FormatDuration(holder.release_ns - holder.hold_start_ns) << " and released it at "
       << FormatOffset(session_, holder.release_ns);
  if (holder.call != nullptr) {
    out_ << ", inside " << Call(*holder.call) << "\n";
    StackLine(*holder.call, "             ");
  } else {
    out_ << ", outside any CUDA call\n";
  }
  HolderMeantime(holder);
  if (holder.gpu) {
    out_ << "  gpu      "
         << DescribeGpuDuring(session_, *holder.gpu, HolderGpuWindow(session_, holder), true)
         << "\n";
  }
}

void TextReport::HolderMeantime(const HolderActivity& holder) {
  uint64_t span = holder.on_cpu_ns + holder.asleep_ns + holder.runnable_ns;
  if (span == 0) return;
  out_ << "  meantime ";
  if (holder.own_wait && holder.asleep_ns >= holder.on_cpu_ns) {
    out_ << "the holder was "
         << SleptWords(session_, *holder.own_wait, WaitClass::kOther, holder.asleep_ns,
                       LockNames());
    if (holder.own_waker_tid != 0 || !holder.own_waker_comm.empty()) {
      out_ << ", " << Waker(holder.own_waker_tid, holder.own_waker_comm, nullptr);
    }
    out_ << "; on CPU " << FormatDuration(holder.on_cpu_ns) << "\n";
  } else {
    out_ << "the holder was on CPU " << FormatDuration(holder.on_cpu_ns)
         << OnCpuWords(holder.ran) << " (working or spinning while holding it)";
    if (holder.asleep_ns > 0) out_ << ", asleep " << FormatDuration(holder.asleep_ns);
    if (holder.runnable_ns > 0)
      out_ << ", waiting for a CPU " << FormatDuration(holder.runnable_ns);
    out_ << "\n";
  }
}

std::string TextReport::Breakdown(const BlockedCall& blocked) const {
  std::ostringstream text;
  if (blocked.main_object) {
    const Wait* longest = blocked.MainWait();
    text << SleptWords(session_, *blocked.main_object,
                       longest != nullptr ? longest->wait_class : WaitClass::kOther,
                       blocked.main_object_ns, LockNames());
    if (longest != nullptr) text << " [" << WaitClassName(longest->wait_class) << "]";
    // The longest sleep on it decided the call: its lock's owner is the one to name.
    if (longest != nullptr) {
      std::string owner = LockOwnerText(session_, *longest);
      if (!owner.empty()) text << ", " << owner;
    }
    if (blocked.asleep_ns > blocked.main_object_ns) {
      text << " (+" << FormatDuration(blocked.asleep_ns - blocked.main_object_ns) << " elsewhere)";
    }
    text << ", ";
  }
  text << "on CPU " << FormatDuration(blocked.on_cpu_ns);
  if (blocked.runnable_ns > 0)
    text << ", waiting for a CPU " << FormatDuration(blocked.runnable_ns);
  return text.str();
}

void TextReport::Gaps() {
  if (analysis_.gaps.empty()) return;
  const std::vector<int> order = GapsLongestFirst(analysis_);
  out_ << "\nGPU GAPS: " << analysis_.gaps.size() << " intervals of "
       << FormatDuration(analysis_.options.gap_threshold_ns)
       << " or more in which a GPU ran nothing, " << FormatDuration(analysis_.all_gaps.idle_ns)
       << " in all";
  if (analysis_.devices.size() > 1) {
    for (size_t d = 0; d < analysis_.devices.size(); ++d) {
      const GapTotals& totals = analysis_.gap_totals[d];
      if (totals.gaps == 0) continue;
      out_ << "; " << GpuDeviceName(analysis_.devices[d], analysis_.devices) << ": "
           << FormatDuration(totals.idle_ns) << " in " << totals.gaps;
    }
  }
  out_ << "; the longest:\n";
  for (size_t i = 0; i < std::min(order.size(), kGapsShown); ++i) {
    const GpuGap& gap = analysis_.gaps[order[i]];
    out_ << "  at " << FormatOffset(session_, gap.start_ns) << ", "
         << FormatDuration(gap.duration()) << ", "
         << GpuDeviceName(analysis_.devices[gap.device], analysis_.devices) << ": after "
         << ShortCppName(GpuActivityName(session_, *gap.before)) << " on stream "
         << gap.before->stream_id << ", before "
         << ShortCppName(GpuActivityName(session_, *gap.after)) << " on stream " << gap.stream_id;
    if (gap.after_call != nullptr)
      out_ << " (" << session_.ApiName(*gap.after_call) << " at "
           << FormatOffset(session_, gap.after_call->enter_ns) << ")";
    out_ << "\n";
    std::string cause = gap.cause >= 0 ? "; " + CauseRef(gap.cause) : "";
    out_ << "     " << GapWaitWords(session_, gap, LockNames());
    if (!gap.gpu_side && gap.late_thread && gap.module_load_ns > 0)
      out_ << "; " << ModuleLoadWords(gap);
    out_ << cause << "\n";
    RangesLine(gap.nvtx_ranges, "     ");
    if (!gap.gpu_side && gap.late_thread) {
      if (gap.stall >= 0) {
        const Stall& stall = analysis_.stalls[gap.stall];
        // Told with its freeze where it froze with others.
        if (stall.freeze >= 0 && analysis_.freezes[stall.freeze].number <= freezes_shown_) {
          out_ << "       in freeze " << analysis_.freezes[stall.freeze].number << "\n";
        } else {
          WaitedAt(stall.wait, "       ");
          Chain(stall.chain, "       ", stall.deadlock_tid, &stall.wait);
        }
      }
    }
  }
}

// Long waits that were no cause: a handoff (a condition variable, a join, a pipe or socket
// read, a child's exit) ended by another thread of the program, or the driver's event thread
// polling its device. Listed so that "who made it wait" is answered for them too: those on the
// program's critical path one by one; the joins through which the path went into the thread they
// waited for, and the waits of threads the program's end did not wait for (idle pool threads,
// threads that wait for work by design), counted. Those no thread of the program ended (sleeps,
// timeouts, I/O from outside) are counted by class, with the longest of each.
void TextReport::Handoffs() {
  const OtherLongWaits waits = FindOtherLongWaits(analysis_);
  const size_t all_handoffs = waits.handoffs();
  if (all_handoffs == 0 && waits.unended.empty()) return;
  auto where = [&](const Stall& stall) {
    std::string text =
        Thread(stall.tid) + " at " + FormatOffset(session_, stall.wait.start_ns) + " " +
        SleptWords(session_, stall.wait.object, stall.wait_class, stall.asleep_ns(), LockNames()) +
        " [" + WaitClassName(stall.wait_class) + "]";
    if (stall.call != nullptr) text += " in " + session_.ApiName(*stall.call);
    return text;
  };
  // Those on the path first: the program waited for them.
  const bool path_known = waits.path_known;
  const size_t on_path = waits.on_path.size();
  std::vector<int> handoffs = waits.on_path;
  handoffs.insert(handoffs.end(), waits.off_path.begin(), waits.off_path.end());
  const size_t shown = std::min(kHandoffsShown, handoffs.size());
  out_ << "\nOTHER LONG WAITS: " << all_handoffs
       << " handoffs (a thread waiting for another's signal, not contention)";
  if (path_known && all_handoffs > 0)
    out_ << ", " << on_path << " of them on the program's critical path";
  out_ << (handoffs.empty() ? "\n"
           : path_known && on_path > 0 && shown > on_path ? "; the longest, those on it first:\n"
                                                          : "; the longest:\n");
  for (size_t i = 0; i < shown; ++i) {
    const Stall& stall = analysis_.stalls[handoffs[i]];
    out_ << "  " << where(stall) << "\n";
    WaitedAt(stall.wait, "     ");
    Chain(stall.chain, "     ", stall.deadlock_tid, &stall.wait);
  }
  // The waits off the path not shown: counted.
  const std::vector<int> off_path(
      handoffs.begin() + static_cast<std::ptrdiff_t>(std::max(shown, on_path)), handoffs.end());
  if (!waits.joins.empty()) {
    out_ << "  " << waits.joins.size() << (waits.joins.size() == 1 ? " join" : " joins")
         << " through which the program's end waited for the thread joined, "
         << FormatDuration(AsleepTotal(analysis_, waits.joins))
         << " in all: that thread's own waits tell why\n";
  }
  if (!off_path.empty()) {
    std::set<uint32_t> threads;
    for (int s : off_path) threads.insert(analysis_.stalls[s].tid);
    out_ << "  " << off_path.size() << (shown > on_path ? " more" : "") << " wait"
         << (off_path.size() == 1 ? "" : "s") << " of " << threads.size() << " thread"
         << (threads.size() == 1 ? "" : "s")
         << " off the program's critical path (idle pool threads, threads waiting for work), "
         << FormatDuration(AsleepTotal(analysis_, off_path)) << " in all: in report.json\n";
  }
  for (const auto& [wait_class, stalls] : waits.unended) {
    out_ << "  " << stalls.size() << " [" << WaitClassName(wait_class) << "] wait"
         << (stalls.size() == 1 ? "" : "s") << " no thread of the program ended, "
         << FormatDuration(AsleepTotal(analysis_, stalls))
         << " in all; the longest: " << where(analysis_.stalls[LongestOf(analysis_, stalls)])
         << "\n";
  }
}

void TextReport::OtherSlowCalls() {
  const std::vector<int> by_duration = SlowCallsOutsideFreezes(analysis_);
  if (by_duration.empty()) return;
  size_t shown = std::min(by_duration.size(), options_.max_listed);
  out_ << "\nSLOW CUDA CALLS not blocked in a freeze, longest first";
  if (shown < by_duration.size())
    out_ << " (" << shown << " of " << by_duration.size() << "; all in report.json)";
  out_ << "\n";
  for (size_t i = 0; i < shown; ++i) {
    const BlockedCall& blocked = analysis_.blocked_calls[by_duration[i]];
    out_ << "  " << Thread(blocked.call->tid) << " in " << Call(*blocked.call) << "\n      "
         << Breakdown(blocked) << "\n";
    RangesLine(blocked.nvtx_ranges, "      ");
    // A freeze's holder: its stack and GPU are told with the freeze.
    if (auto held = held_by_.find(blocked.call); held != held_by_.end()) {
      out_ << "      it held the lock of freeze " << held->second
           << " meanwhile (its stack and the GPU are there)\n";
      continue;
    }
    // The wait that decided the call: the longest sleep on its main object.
    const Wait* longest = blocked.MainWait();
    if (longest != nullptr && longest->ended_by_exit) {
      out_ << "      " << EndedByExit(*longest) << "\n";
    } else if (longest != nullptr && (longest->waker_tid != 0 || !longest->waker_comm.empty())) {
      out_ << "      " << Waker(longest->waker_tid, longest->waker_comm, longest->waker_call)
           << "\n";
    }
    if (longest != nullptr) {
      UserStackLine(*longest, "      ");
      PythonStackAt(longest->waker_python_stack, "      ", "released at ");
    }
    if (blocked.gpu)
      out_ << "      " << DescribeGpuDuring(session_, *blocked.gpu, "the call", true) << "\n";
    StackLine(*blocked.call, "      ");
  }
}

// The tables of `nsys stats`: the first kTableRows rows by total time, report.json has them all.
void TextReport::Tables() {
  auto row = [](const std::vector<std::string>& cells) {
    static constexpr size_t kWidths[] = {10, 9, 10, 10, 10};
    std::string text = "  ";
    for (size_t i = 0; i + 1 < cells.size(); ++i) {
      size_t width = i < std::size(kWidths) ? kWidths[i] : 10;
      text +=
          std::string(width > cells[i].size() ? width - cells[i].size() : 0, ' ') + cells[i] + " ";
    }
    return OneLine(text + " " + cells.back());
  };
  std::vector<ApiCallRow> calls = ApiCallTable(session_);
  if (!calls.empty()) {
    out_ << "\nCUDA API CALLS by total time";
    if (calls.size() > kTableRows)
      out_ << " (" << kTableRows << " of " << calls.size() << "; all in report.json)";
    out_ << "\n" << row({"total", "count", "median", "max", "blocked", "name"}) << "\n";
    for (size_t i = 0; i < std::min(kTableRows, calls.size()); ++i) {
      const ApiCallRow& call = calls[i];
      out_ << row({FormatDuration(call.total_ns), WithThousands(call.count),
                   FormatDuration(call.median_ns), FormatDuration(call.max_ns),
                   FormatDuration(call.blocked_ns), call.name})
           << "\n";
    }
  }
  if (!analysis_.ranges.empty()) {
    // The program's own phases (NVTX): which loses time, in one look.
    const auto& ranges = analysis_.ranges;
    out_ << "\nRANGES (NVTX) by total time";
    if (ranges.size() > kTableRows)
      out_ << " (" << kTableRows << " of " << ranges.size() << "; all in report.json)";
    out_ << "\n" << row({"total", "count", "blocked", "GPU idle", "name"}) << "\n";
    for (size_t i = 0; i < std::min(kTableRows, ranges.size()); ++i) {
      const RangeTotals& range = ranges[i];
      out_ << row({FormatDuration(range.total_ns), WithThousands(range.count),
                   FormatDuration(range.blocked_ns), FormatDuration(range.gpu_idle_ns),
                   RangeName(session_, range.name, range.domain)})
           << "\n";
    }
  }
  std::vector<KernelRow> kernels = KernelTable(session_);
  if (!kernels.empty()) {
    out_ << "\nGPU KERNELS by total time";
    if (kernels.size() > kTableRows)
      out_ << " (" << kTableRows << " of " << kernels.size() << "; all in report.json)";
    out_ << "\n" << row({"total", "count", "median", "max", "name"}) << "\n";
    for (size_t i = 0; i < std::min(kTableRows, kernels.size()); ++i) {
      const KernelRow& kernel = kernels[i];
      out_ << row({FormatDuration(kernel.total_ns), WithThousands(kernel.count),
                   FormatDuration(kernel.median_ns), FormatDuration(kernel.max_ns),
                   ShortCppName(kernel.name)})
           << "\n";
    }
  }
}

// What the classes in brackets mean, those the text used.
void TextReport::RangesLine(const std::vector<uint32_t>& ranges, const char* indent) {
  if (std::string words = InRangesWords(session_, ranges); !words.empty())
    out_ << indent << OneLine(words) << "\n";
}

void TextReport::Legend() {
  const std::string text = out_.str();
  std::vector<std::string> used;
  for (const auto& [name, meaning] : ClassLegend()) {
    if (text.find("[" + std::string(name) + "]") != std::string::npos)
      used.push_back(std::string("  [") + name + "] " + meaning + "\n");
  }
  if (used.empty()) return;
  out_ << "\nLEGEND of the [classes]\n";
  for (const std::string& line : used) out_ << line;
}

}  // namespace gprof::collector::report_text

namespace gprof::collector {

std::string RenderTextReport(const Session& session, const Analysis& analysis,
                             const ReportOptions& options) {
  return report_text::TextReport(session, analysis, options).Render();
}

}  // namespace gprof::collector
