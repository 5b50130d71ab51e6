#include "report_diagnosis.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gpu_vocabulary.h"
#include "report_format.h"

namespace gprof::collector {
namespace {

// The diagnosis stays short: the first few of each list (report.json has them all).
constexpr size_t kShortList = 5;

class DiagnosisText {
 public:
  DiagnosisText(const Session& session, const Diagnosis& diagnosis, size_t max_listed)
      : session_(session), diagnosis_(diagnosis), max_listed_(std::min(max_listed, kShortList)) {}

  std::string Render() {
    Causes();
    Freezes();
    Gaps();
    Handoffs();
    return out_.str();
  }

 private:
  std::string Thread(uint32_t tid) const { return session_.ThreadLabel(tid); }
  std::string Threads(const std::vector<uint32_t>& tids, size_t shown = 4) const {
    std::string text;
    for (size_t i = 0; i < std::min(shown, tids.size()); ++i)
      text += (i == 0 ? "" : ", ") + Thread(tids[i]);
    if (tids.size() > shown) text += " and " + std::to_string(tids.size() - shown) + " more";
    return text;
  }
  // The CPU cause's threads by their own runnable time, longest first; `delayed`: instead the
  // threads whose waits were held up for want of a CPU (latency_sensitive), by how long, and how.
  std::string CpuWaits(bool delayed) const;
  void Chain(const std::vector<ChainLink>& chain, const char* indent, uint32_t deadlock_tid = 0);
  void Causes();
  void Freezes();
  void Gaps();
  void Handoffs();

  const Session& session_;
  const Diagnosis& diagnosis_;
  size_t max_listed_;
  std::ostringstream out_;
};

std::string DiagnosisText::CpuWaits(bool delayed) const {
  constexpr size_t kShown = 4;
  std::vector<const CpuWait*> listed;
  for (const CpuWait& wait : diagnosis_.cpu_waits) {
    if (delayed ? wait.latency_sensitive : wait.short_of_cpu) listed.push_back(&wait);
  }
  if (delayed) {
    std::stable_sort(listed.begin(), listed.end(), [](const CpuWait* a, const CpuWait* b) {
      return a->delayed_ns() > b->delayed_ns();
    });
  }
  std::string text;
  for (size_t i = 0; i < std::min(kShown, listed.size()); ++i) {
    const CpuWait& wait = *listed[i];
    const char* separator = i == 0 ? "" : delayed ? "; " : ", ";
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
          "the threads it waited for were runnable " + FormatDuration(wait.held_up_ns) + " (";
      for (size_t b = 0; b < std::min<size_t>(3, wait.held_up_by.size()); ++b)
        by += (b == 0 ? "" : ", ") + Thread(wait.held_up_by[b].first);
      if (wait.held_up_by.size() > 3)
        by += " and " + std::to_string(wait.held_up_by.size() - 3) + " more";
      how.push_back(by + ")");
    }
    text += ": ";
    for (size_t h = 0; h < how.size(); ++h) text += (h == 0 ? "" : ", ") + how[h];
  }
  if (listed.size() > kShown) text += " and " + std::to_string(listed.size() - kShown) + " more";
  return text;
}

// "ended by X asleep on Y [kernel lock] <- ended by Z on CPU in munmap of 512.0 MiB (root)"
void DiagnosisText::Chain(const std::vector<ChainLink>& chain, const char* indent,
                          uint32_t deadlock_tid) {
  for (size_t i = 0; i < chain.size(); ++i) {
    const char* step = chain[i].creator ? "  created by "
                       : i == 0         ? (chain[i].owner ? "held by " : "ended by ")
                                        : "  who waited for ";
    out_ << indent << step << DescribeLink(session_, chain[i]);
    if (i + 1 == chain.size()) out_ << (deadlock_tid != 0 ? "" : "  <- root");
    out_ << "\n";
  }
  if (deadlock_tid != 0) {
    out_ << indent << "  who waited for a lock held by " << Thread(deadlock_tid)
         << "  <- DEADLOCK: the waits form a cycle\n";
  }
}

void DiagnosisText::Causes() {
  out_ << "DIAGNOSIS: causes ranked by the GPU idle time they explain, then by thread time "
          "blocked\n";
  if (!diagnosis_.kernel_recorded) {
    out_ << "  the kernel was not recorded: waits cannot be explained (run as root, or give "
            "gprof-run CAP_BPF and CAP_PERFMON)\n";
  }
  size_t shown = 0;
  for (size_t i = 0; i < diagnosis_.causes.size() && shown < max_listed_; ++i, ++shown) {
    const Cause& cause = diagnosis_.causes[i];
    out_ << "  " << i + 1 << ". [" << WaitClassName(cause.wait_class) << "] " << cause.identity
         << "\n";
    std::vector<std::string> facts;
    if (cause.gpu_idle_ns > 0) {
      facts.push_back("GPU idle " + FormatDuration(cause.gpu_idle_ns) + " in " +
                      std::to_string(cause.gaps.size()) + " gap" +
                      (cause.gaps.size() == 1 ? "" : "s"));
    }
    if (cause.wait_count > 0) {
      std::string blocked = std::to_string(cause.tids.size()) + " thread" +
                            (cause.tids.size() == 1 ? "" : "s") + " " +
                            (cause.wait_class == WaitClass::kCpu ? "runnable" : "blocked") + " " +
                            FormatDuration(cause.blocked_ns);
      if (cause.wait_class != WaitClass::kCpu) {
        blocked += " in " + std::to_string(cause.wait_count) + " wait" +
                   (cause.wait_count == 1 ? "" : "s") + " (longest " +
                   FormatDuration(cause.longest_ns) + ")";
      }
      facts.push_back(
          blocked + ": " +
          (cause.wait_class == WaitClass::kCpu ? CpuWaits(false) : Threads(cause.tids)));
    }
    for (size_t f = 0; f < facts.size(); ++f) out_ << (f == 0 ? "     " : "; ") << facts[f];
    if (!facts.empty()) out_ << "\n";
    if (cause.wait_class == WaitClass::kCpu) {
      if (std::string delayed = CpuWaits(true); !delayed.empty())
        out_ << "     waits held up for want of a CPU: " << delayed << "\n";
    }
    if (cause.holder_tid != 0 && cause.wait_class != WaitClass::kCpu)
      out_ << "     held by " << Thread(cause.holder_tid) << "\n";
    for (int s : cause.stalls) {
      const Stall& stall = diagnosis_.stalls[s];
      if (!InDeadlock(stall)) continue;
      out_ << "     DEADLOCK: " << DescribeDeadlock(session_, stall) << "\n";
      break;
    }
    if (cause.root) out_ << "     root: " << DescribeLink(session_, *cause.root) << "\n";
    if (!cause.freezes.empty()) {
      const DiagnosedFreeze& freeze = diagnosis_.freezes[cause.freezes.front()];
      out_ << "     froze " << cause.freezes.size() << " time"
           << (cause.freezes.size() == 1 ? "" : "s") << " (first at "
           << FormatOffset(session_, freeze.start_ns) << ", "
           << FormatDuration(freeze.end_ns - freeze.start_ns) << ", " << freeze.tids.size()
           << " threads)\n";
    }
  }
  if (diagnosis_.causes.empty() && diagnosis_.kernel_recorded) {
    out_ << "  no contention: no thread waited "
         << FormatDuration(diagnosis_.options.wait_threshold_ns)
         << " or more on a lock, the GIL, the kernel or the GPU driver, ";
    if (diagnosis_.cpu_waits.empty()) {
      out_ << "no thread lacked a CPU";
    } else {
      // Threads that waited for a CPU, but held no wait up by it.
      out_ << "or on a thread that lacked a CPU (waiting for a CPU in all: ";
      for (size_t i = 0; i < std::min<size_t>(4, diagnosis_.cpu_waits.size()); ++i) {
        const CpuWait& wait = diagnosis_.cpu_waits[i];
        out_ << (i == 0 ? "" : ", ") << Thread(wait.tid) << " " << FormatDuration(wait.runnable_ns);
        if (wait.life_ns > 0)
          out_ << ", " << wait.runnable_ns * 100 / wait.life_ns << "% of its time";
      }
      if (diagnosis_.cpu_waits.size() > 4)
        out_ << " and " << diagnosis_.cpu_waits.size() - 4 << " more";
      out_ << ")";
    }
    if (diagnosis_.gaps.empty()) out_ << ", and no GPU was idle between its work";
    out_ << "\n";
  }
  if (diagnosis_.causes.size() > shown)
    out_ << "  ... " << diagnosis_.causes.size() - shown << " more in report.json\n";
}

void DiagnosisText::Freezes() {
  if (diagnosis_.freezes.empty()) return;
  // Longest first: the worst is what the reader came for.
  std::vector<const DiagnosedFreeze*> order;
  for (const DiagnosedFreeze& freeze : diagnosis_.freezes) order.push_back(&freeze);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->end_ns - a->start_ns > b->end_ns - b->start_ns;
  });
  out_ << "\nWHY THREADS FROZE TOGETHER (" << diagnosis_.freezes.size() << ")\n";
  for (size_t i = 0; i < std::min(order.size(), max_listed_); ++i) {
    const DiagnosedFreeze& freeze = *order[i];
    out_ << "  at " << FormatOffset(session_, freeze.start_ns) << ", "
         << FormatDuration(freeze.end_ns - freeze.start_ns) << ": " << Threads(freeze.tids, 6)
         << "\n";
    if (freeze.cause >= 0) {
      const Cause& cause = diagnosis_.causes[freeze.cause];
      out_ << "     all waited on " << cause.identity << " [" << WaitClassName(cause.wait_class)
           << "], cause " << freeze.cause + 1 << "\n";
    }
    // The longest wait of the freeze, with its chain.
    const Stall* longest = nullptr;
    for (int s : freeze.stalls) {
      const Stall& stall = diagnosis_.stalls[s];
      if (longest == nullptr || stall.asleep_ns() > longest->asleep_ns()) longest = &stall;
    }
    if (longest != nullptr) {
      out_ << "     longest: " << Thread(longest->tid) << " asleep "
           << FormatDuration(longest->asleep_ns());
      if (longest->call != nullptr) out_ << " in " << session_.ApiName(*longest->call);
      out_ << "\n";
      Chain(longest->chain, "       ", longest->deadlock_tid);
    }
  }
}

void DiagnosisText::Gaps() {
  if (diagnosis_.gaps.empty()) return;
  uint64_t total = 0;
  std::vector<uint64_t> device_total(diagnosis_.devices.size());
  std::vector<size_t> device_gaps(diagnosis_.devices.size());
  for (const GpuGap& gap : diagnosis_.gaps) {
    total += gap.duration();
    device_total[gap.device] += gap.duration();
    ++device_gaps[gap.device];
  }
  std::vector<const GpuGap*> order;
  for (const GpuGap& gap : diagnosis_.gaps) order.push_back(&gap);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->duration() > b->duration(); });
  out_ << "\nGPU GAPS: " << diagnosis_.gaps.size() << " intervals of "
       << FormatDuration(diagnosis_.options.gap_threshold_ns)
       << " or more in which a GPU ran nothing, " << FormatDuration(total) << " in all\n";
  for (size_t d = 0; d < diagnosis_.devices.size(); ++d) {
    if (device_gaps[d] == 0) continue;
    const GpuDevice& device = diagnosis_.devices[d];
    out_ << "  " << GpuDeviceName(device, diagnosis_.devices) << ": "
         << FormatDuration(device_total[d]) << " in " << device_gaps[d] << " gap"
         << (device_gaps[d] == 1 ? "" : "s") << ", of " << FormatDuration(device.idle_ns())
         << " idle from its first work to its last\n";
  }
  out_ << "  the longest:\n";
  for (size_t i = 0; i < std::min(order.size(), max_listed_); ++i) {
    const GpuGap& gap = *order[i];
    out_ << "  at " << FormatOffset(session_, gap.start_ns) << ", "
         << FormatDuration(gap.duration()) << ", "
         << GpuDeviceName(diagnosis_.devices[gap.device], diagnosis_.devices) << ": after "
         << GpuActivityName(session_, *gap.before) << " on stream " << gap.before->stream_id;
    if (gap.before_call != nullptr) out_ << " (launched by " << Thread(gap.before_call->tid) << ")";
    out_ << ", before " << GpuActivityName(session_, *gap.after) << " on stream " << gap.stream_id;
    if (gap.after_call != nullptr)
      out_ << " (launched by " << Thread(gap.after_call->tid) << " in "
           << session_.ApiName(*gap.after_call) << " at "
           << FormatOffset(session_, gap.after_call->enter_ns) << ")";
    out_ << "\n";
    if (gap.gpu_side) {
      out_ << "     queued in time: the GPU side held it\n";
    } else if (gap.late_thread) {
      out_ << "     the GPU waited for " << DescribeLink(session_, *gap.late_thread);
      if (gap.module_load_ns > 0)
        out_ << "; the driver spent " << FormatDuration(gap.module_load_ns)
             << " of the wait loading a CUDA module";
      out_ << "\n";
      if (gap.stall >= 0) {
        const Stall& stall = diagnosis_.stalls[gap.stall];
        Chain(stall.chain, "       ", stall.deadlock_tid);
      }
    } else {
      out_ << "     the call that launched the next work was not recorded\n";
    }
    if (gap.cause >= 0) out_ << "     cause " << gap.cause + 1 << "\n";
  }
}

// Long waits that were no contention: a handoff (a condition variable, a join, a pipe or socket
// read, a child's exit) ended by another thread of the program, or the driver's event thread
// polling its device. Not ranked as causes (threads idle this way by design), listed so that "who
// made it wait" is answered for them too. Those no thread of the program ended (sleeps, timeouts,
// I/O from outside) are counted by class, with the longest of each.
void DiagnosisText::Handoffs() {
  std::vector<const Stall*> handoffs;
  std::map<WaitClass, std::vector<const Stall*>> unended;
  for (const Stall& stall : diagnosis_.stalls) {
    if (stall.cause >= 0) continue;
    if (!stall.chain.empty()) {
      handoffs.push_back(&stall);
    } else if (!IsIdleWait(stall)) {
      unended[stall.wait_class].push_back(&stall);
    }
  }
  if (handoffs.empty() && unended.empty()) return;
  auto longer = [](const Stall* a, const Stall* b) { return a->asleep_ns() > b->asleep_ns(); };
  auto where = [&](const Stall& stall) {
    std::string text = Thread(stall.tid) + " at " + FormatOffset(session_, stall.wait.start_ns) +
                       " asleep " + FormatDuration(stall.asleep_ns()) + " " +
                       WhereAsleep(session_, stall.wait.object) + " [" +
                       WaitClassName(stall.wait_class) + "]";
    if (stall.call != nullptr) text += " in " + session_.ApiName(*stall.call);
    return text;
  };
  std::stable_sort(handoffs.begin(), handoffs.end(), longer);
  out_ << "\nOTHER LONG WAITS: " << handoffs.size()
       << " handoffs (a thread waiting for another's signal, not contention)";
  out_ << (handoffs.empty() ? "\n" : "; the longest:\n");
  for (size_t i = 0; i < std::min(kShortList, handoffs.size()); ++i) {
    out_ << "  " << where(*handoffs[i]) << "\n";
    Chain(handoffs[i]->chain, "     ", handoffs[i]->deadlock_tid);
  }
  for (auto& [wait_class, stalls] : unended) {
    uint64_t total_ns = 0;
    for (const Stall* stall : stalls) total_ns += stall->asleep_ns();
    const Stall& longest = **std::min_element(stalls.begin(), stalls.end(), longer);
    out_ << "  " << stalls.size() << " [" << WaitClassName(wait_class) << "] wait"
         << (stalls.size() == 1 ? "" : "s") << " no thread of the program ended, "
         << FormatDuration(total_ns) << " in all; the longest: " << where(longest) << "\n";
  }
}

}  // namespace

std::string RenderDiagnosisText(const Session& session, const Diagnosis& diagnosis,
                                size_t max_listed) {
  return DiagnosisText(session, diagnosis, max_listed).Render();
}

}  // namespace gprof::collector
