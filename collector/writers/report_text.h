// report.txt's writer, one class whose parts the files that say them write: the header (what was
// recorded, lost, and how), report_text_header.cc; the summary, causes, freezes, gaps, other waits,
// slow calls and tables, report_text.cc. Internal to report.txt.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/model/model.h"
#include "collector/writers/report.h"
#include "collector/writers/report_ranks.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"

namespace gprof::collector::report_text {

// How many causes, freezes, gaps and slow calls the text tells of; report.json has them all.
constexpr size_t kCausesShown = 10;
constexpr size_t kGapsShown = 5;
constexpr size_t kHandoffsShown = 5;
constexpr size_t kTableRows = 10;
constexpr size_t kStackLinesShown = 8;
constexpr size_t kPythonFramesShown = 6;
// A command line is shown up to this long (a launcher's can be megabytes).
constexpr size_t kCommandShownBytes = 400;
// The summary answers in at most this many lines.
constexpr size_t kSummaryLines = 15;

// `text` cut to one line of the text's width, "..." where it was cut.
inline std::string OneLine(const std::string& text) {
  if (text.size() <= kTextWidth) return text;
  return Shortened(text, kTextWidth - 3) + "...";
}

// "freeze 1", "freezes 1, 2 and 4", of those numbered (0: not shown in the text).
inline std::string NumberList(const char* one, const char* many, std::vector<size_t> numbers) {
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  std::string text = numbers.size() == 1 ? one : many;
  for (size_t i = 0; i < numbers.size(); ++i) {
    text += (i == 0 ? " " : i + 1 == numbers.size() ? " and " : ", ") + std::to_string(numbers[i]);
  }
  return text;
}

class TextReport {
 public:
  TextReport(const Session& session, const Analysis& analysis, const ReportOptions& options)
      : session_(session), analysis_(analysis), options_(options) {}

  std::string Render() {
    NumberEvents();
    Header();
    Summary();
    Causes();
    out_ << RankWaitsText({{&session_, &analysis_, 0}}, analysis_.rank_waits);
    Freezes();
    Gaps();
    Handoffs();
    OtherSlowCalls();
    Tables();
    Legend();
    return FitLines(out_.str());
  }

 private:
  std::string Thread(uint32_t tid) const { return QuotedThread(session_, tid); }
  std::string Threads(const std::vector<uint32_t>& tids, size_t shown = 4) const {
    std::string text;
    for (size_t i = 0; i < std::min(shown, tids.size()); ++i)
      text += (i == 0 ? "" : ", ") + Thread(tids[i]);
    if (tids.size() > shown) text += " and " + std::to_string(tids.size() - shown) + " more";
    return text;
  }
  std::string Call(const ApiCall& call) const {
    return session_.ApiName(call) + " (" + FormatOffset(session_, call.enter_ns) + ", " +
           FormatDuration(call.duration()) + ")";
  }
  // "woken by "holder" (1236), inside cudaDeviceSynchronize (+0.208 s, 40.1 ms)"
  std::string Waker(uint32_t tid, const std::string& comm, const ApiCall* call) const {
    if (tid == 0) return comm.empty() ? "woken by an interrupt" : "woken by " + comm;
    std::string text =
        "woken by " + (session_.threads.contains(tid) ? Thread(tid)
                                                      : "\"" + comm + "\" (" + std::to_string(tid) +
                                                            ", outside the traced tree)");
    if (session_.IsProfilerThread(tid)) text += ", gprof-run's own thread";
    if (call != nullptr) text += ", inside " + Call(*call);
    return text;
  }
  // "ended by the process's exit (begun by "main" (1234)), not by a release"
  std::string EndedByExit(const Wait& wait) const {
    std::string by = wait.exit_tid == 0 ? std::string()
                     : session_.threads.contains(wait.exit_tid)
                         ? " (begun by " + Thread(wait.exit_tid) + ")"
                         : " (begun by \"" + wait.exit_comm + "\" (" +
                               std::to_string(wait.exit_tid) + "), outside the traced tree)";
    return "ended by the process's exit" + by + ", not by a release";
  }
  bool AnyGpu() const { return !analysis_.gpu.devices.empty(); }
  std::string ClassOf(const Cause& cause) const { return CauseClassLabel(cause); }
  // What a cause is: the lock or object in the text's one notation, the late thread, the CPUs.
  std::string CauseWhat(const Cause& cause) const;
  // "cause 3", or "a cause listed in report.json" past those the text shows.
  std::string CauseRef(int cause) const {
    if (cause < 0) return {};
    if (static_cast<size_t>(cause) < causes_shown_)
      return "cause " + std::to_string(analysis_.causes[cause].number);
    return "a cause listed in report.json";
  }
  std::string FreezeRefs(const std::vector<int>& freezes) const;
  std::string CpuWaits(bool delayed) const;
  // `first`: the wait the chain explains, whose waker (or owner) is its first link.
  void Chain(const std::vector<ChainLink>& chain, const char* indent, uint32_t deadlock_tid,
             const Wait* first);
  // `lines` one a line, the first after `first` ("at ", "waited at "), the others under it.
  void LabeledLines(const std::vector<std::string>& lines, const std::string& indent,
                    const std::string& first);
  void StackLines(const std::vector<StackFrame>& frames, const std::string& indent,
                  const char* first, bool truncated = false);
  // A Python stack, where the kernel recorder read one, one frame a line after `label`.
  void PythonStackAt(const PythonStack* stack, const std::string& indent, const std::string& label);
  // Where a wait waited, in Python: not again where its cause said it.
  void WaitedAt(const Wait& wait, const std::string& indent);
  // What a chain's root was running: its stack as it slept, or the one sampled most on CPU.
  void RootStack(const ChainLink& root, const std::string& indent);
  void StackLine(const ApiCall& call, const std::string& indent);
  void UserStackLine(const Wait& wait, const std::string& indent);

  void NumberEvents();
  void Header();
  void CountedLine();
  void GpuLines();
  void CaptureLines();
  void UnrecordedLines();
  void StillRunningLines();
  void NestedLines();
  void PythonLines();
  void Summary();
  void Causes();
  void Freezes();
  void FreezeLines(const Freeze& freeze);
  void FreezeDetail(const CallsInFreeze& freeze, bool with_heading);
  void FreezeHolder(const CallsInFreeze& freeze);
  void HolderMeantime(const HolderActivity& holder);
  void Gaps();
  void Handoffs();
  void OtherSlowCalls();
  void Tables();
  void Legend();
  // "in train_step > forward" on a line of its own, where the program said where it was (NVTX).
  void RangesLine(const std::vector<uint32_t>& ranges, const char* indent);
  std::string Breakdown(const BlockedCall& blocked) const;

  const Session& session_;
  const Analysis& analysis_;
  const ReportOptions& options_;
  // The libraries the diagnosis named heap locks by, for the one name the text gives each lock.
  const LockUsers* LockNames() const { return &analysis_.lock_users; }
  std::ostringstream out_;
  size_t causes_shown_ = 0;
  // Freezes in the analysis's numbering (freeze 1, the longest, first).
  std::vector<const Freeze*> freezes_;        // [number - 1]
  std::map<const ApiCall*, size_t> held_by_;  // a freeze holder's call -> the freeze's number
  size_t freezes_shown_ = 0;
  // The waits whose Python stacks a cause told (where it waited, where it was released): a freeze
  // or gap that explains the same wait does not tell them again.
  std::set<const Wait*> waited_told_, released_told_;
};

}  // namespace gprof::collector::report_text
