#include "collector/writers/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collector/analysis/wait_class.h"
#include "collector/writers/report_tables.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"

namespace gprof::collector {

std::string EscapeHtml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

std::string Escape(std::string_view text) { return EscapeHtml(text); }

// The CSS class of each wait class's colour, and of the states that are no wait.
const char* ClassCss(WaitClass wait_class) {
  switch (wait_class) {
    case WaitClass::kUserLock: return "w-lock";
    case WaitClass::kCondition: return "w-cond";
    case WaitClass::kPythonGil: return "w-gil";
    case WaitClass::kKernelLock: return "w-klock";
    case WaitClass::kGpuDriver: return "w-driver";
    case WaitClass::kPageFault: return "w-fault";
    case WaitClass::kIo: return "w-io";
    case WaitClass::kSleep: return "w-sleep";
    case WaitClass::kCpu: return "w-cpu";
    case WaitClass::kOther: return "w-other";
  }
  return "w-other";
}
// In the legend's order.
constexpr WaitClass kAllClasses[] = {
    WaitClass::kUserLock, WaitClass::kCondition,  WaitClass::kPythonGil, WaitClass::kKernelLock,
    WaitClass::kGpuDriver, WaitClass::kPageFault, WaitClass::kIo,        WaitClass::kSleep,
    WaitClass::kCpu,      WaitClass::kOther};

constexpr char kStyle[] = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1500px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1em;margin:1em 0 .3em}
code,pre,.mono{font-family:ui-monospace,monospace;font-size:12.5px}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.6em}
table{border-collapse:collapse;margin:.4em 0}td,th{padding:2px 8px;border-bottom:1px solid #e4e4e4}
th{text-align:left;background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}
.fig{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start;margin:.5em 0 1.5em}
.fig svg{border:1px solid #ddd;background:#fff;flex:none}
.words{flex:1;min-width:320px;max-width:560px}.words p{margin:.2em 0}
.legend span.sw{display:inline-block;width:12px;height:12px;margin:0 3px 0 10px;vertical-align:-1px}
ol.causes li{margin:.3em 0}
.w-lock{fill:#d62728;background:#d62728}.w-cond{fill:#8c9db5;background:#8c9db5}
.w-gil{fill:#ff7f0e;background:#ff7f0e}.w-klock{fill:#9467bd;background:#9467bd}
.w-driver{fill:#17becf;background:#17becf}.w-fault{fill:#8c564b;background:#8c564b}
.w-io{fill:#bcbd22;background:#bcbd22}.w-sleep{fill:#aec7e8;background:#aec7e8}
.w-cpu{fill:#f7b6d2;background:#f7b6d2}.w-other{fill:#7f7f7f;background:#7f7f7f}
.w-short{fill:#d0d0d0;background:#d0d0d0}.run{fill:#b7e4b0;background:#b7e4b0}
.call{fill:#3b4a5a;background:#3b4a5a}.busy{fill:#1f77b4;background:#1f77b4}
.idle{fill:#fbe3e0;background:#fbe3e0}.gap{fill:none;stroke:#d62728;stroke-width:1.5}
.mark{fill:#fff6c8}.axis{stroke:#999}.tick{font-size:10px;fill:#555}
.label{font-size:11px;fill:#222}.arrow{stroke:#111;stroke-width:1.2}
.sub{outline:2px solid #222}
)";

// One picture: some threads and GPUs over one window of time.
struct Figure {
  std::string id;  // the anchor: "cause-1", "freeze-2", "gap-3"
  std::string heading;
  std::vector<std::string> words;  // the report's words, one paragraph each
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t mark_start_ns = 0, mark_end_ns = 0;  // the event pictured, shaded
  std::vector<uint32_t> tids;                   // the rows, subjects first
  std::vector<size_t> devices;                  // GPU lanes, into Analysis::devices

  struct Segment {
    uint64_t start_ns, end_ns;
    const char* css;
    std::string title;
  };
  struct Row {
    std::vector<Segment> states;  // off-CPU, over the row's "running" background
    std::vector<Segment> calls;   // CUDA calls
  };
  struct Lane {
    std::vector<Segment> busy;  // merged kernels, copies, memsets
    uint64_t count = 0;         // in the stretch being merged
    const GpuActivity* longest = nullptr;
  };
  struct Arrow {
    uint32_t from_tid, to_tid;
    uint64_t time_ns;
    std::string title;
  };
  std::vector<Row> rows;
  std::vector<Lane> lanes;
  std::vector<Arrow> arrows;

  int RowOf(uint32_t tid) const {
    auto it = std::find(tids.begin(), tids.end(), tid);
    return it == tids.end() ? -1 : static_cast<int>(it - tids.begin());
  }
  bool Overlaps(uint64_t start, uint64_t end) const { return end > start_ns && start < end_ns; }
};

// Rows and lanes past these are left out of a picture: it must stay readable.
constexpr size_t kMaxRows = 10;
constexpr size_t kMaxLanes = 4;
constexpr size_t kMaxSegmentsPerRow = 1500;
constexpr size_t kMaxArrows = 200;
constexpr int kWidth = 900;
constexpr int kLeft = 190;  // the labels' column
constexpr int kPlotWidth = kWidth - kLeft - 12;
constexpr int kRowHeight = 16;
constexpr int kRowPitch = 28;  // a row and the CUDA calls' band above it
constexpr int kTop = 26;

// A busy thread has thousands of waits in a window: what is narrower than a fifth of a pixel is
// not drawn, and one that begins within a pixel of the last of its colour extends it, so that
// a picture holds about as many shapes as it has pixels.
void AddSegment(std::vector<Figure::Segment>& segments, Figure::Segment segment,
                const Figure& figure) {
  const uint64_t pixel_ns = std::max<uint64_t>((figure.end_ns - figure.start_ns) / kPlotWidth, 1);
  if ((segment.end_ns - segment.start_ns) * 5 < pixel_ns) return;
  if (!segments.empty()) {
    Figure::Segment& last = segments.back();
    if (last.css == segment.css && segment.start_ns >= last.start_ns &&
        segment.start_ns <= last.end_ns + pixel_ns) {
      if (segment.end_ns > last.end_ns) {
        if (!last.title.ends_with(", and more")) last.title += ", and more";
        last.end_ns = segment.end_ns;
      }
      return;
    }
  }
  if (segments.size() < kMaxSegmentsPerRow) segments.push_back(std::move(segment));
}

class HtmlReport {
 public:
  HtmlReport(const Session& session, const Analysis& analysis, const HtmlReportOptions& options)
      : session_(session), analysis_(analysis), options_(options) {
    for (const Stall& stall : analysis_.stalls) stalls_by_tid_[stall.tid].push_back(&stall);
    for (auto& [tid, stalls] : stalls_by_tid_) {
      std::stable_sort(stalls.begin(), stalls.end(), [](const Stall* a, const Stall* b) {
        return a->wait.start_ns < b->wait.start_ns;
      });
    }
  }

  std::string Render(std::string_view text_report) {
    out_ << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
         << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'\">\n"
         << "<title>gprof-run report: " << Escape(CommandLine()) << "</title>\n<style>" << kStyle
         << "</style></head><body>\n";
    Header();
    Summary();
    MakeFigures();
    Gather();
    Legend();
    Section("Causes", "causes", "cause-");
    Section("Freezes: threads that froze together", "freezes", "freeze-");
    Section("GPU gaps: the GPU ran nothing", "gaps", "gap-");
    Tables();
    out_ << "<h2 id=\"text\">The text report</h2>\n<details><summary>report.txt, as printed"
            "</summary><pre>"
         << Escape(text_report) << "</pre></details>\n</body></html>\n";
    return out_.str();
  }

 private:
  std::string CommandLine() const {
    return CommandLineText(session_.meta.command, 300);
  }
  std::string Thread(uint32_t tid) const { return session_.ThreadLabel(tid); }
  std::string Threads(const std::vector<uint32_t>& tids, size_t shown = 5) const {
    std::string text;
    for (size_t i = 0; i < std::min(shown, tids.size()); ++i)
      text += (i == 0 ? "" : ", ") + Thread(tids[i]);
    if (tids.size() > shown) text += " and " + std::to_string(tids.size() - shown) + " more";
    return text;
  }
  static std::string Plural(size_t n, std::string_view word) { return CountOf(n, word); }

  void Header();
  void Summary();
  std::string CauseFacts(const Cause& cause) const;
  void MakeFigures();
  void AddCauseFigure(size_t index);
  void AddFreezeFigure(size_t index);
  void AddGapFigure(size_t index);
  void AddChainWords(Figure& figure, const Stall& stall) const;
  void AddRangeWords(Figure& figure, const std::vector<uint32_t>& ranges) const {
    if (std::string words = InRangesWords(session_, ranges); !words.empty())
      figure.words.push_back(words);
  }
  // The longest stretch one of the first of `tids` was runnable (preempted, or woken and not yet
  // run): one pass over the off-CPU record.
  std::optional<std::pair<uint64_t, uint64_t>> LongestRunnable(
      const std::vector<uint32_t>& tids) const {
    std::optional<std::pair<uint64_t, uint64_t>> longest;
    const size_t count = std::min<size_t>(tids.size(), kMaxRows);
    for (const OffCpuInterval& interval : session_.off_cpu) {
      if (std::find(tids.begin(), tids.begin() + count, interval.tid) == tids.begin() + count)
        continue;
      uint64_t start = interval.state() == OffCpuState::kRunnable ? interval.start_ns
                       : interval.wake_ns != 0 ? std::max(interval.wake_ns, interval.start_ns)
                                               : interval.end_ns;
      if (start < interval.end_ns &&
          (!longest || interval.end_ns - start > longest->second - longest->first))
        longest = std::make_pair(start, interval.end_ns);
    }
    return longest;
  }
  void AddRow(Figure& figure, uint32_t tid) const {
    if (tid != 0 && figure.RowOf(tid) < 0 && figure.tids.size() < kMaxRows)
      figure.tids.push_back(tid);
  }
  void AddChainRows(Figure& figure, const std::vector<ChainLink>& chain) const {
    for (const ChainLink& link : chain) AddRow(figure, link.tid);
  }
  // The GPUs that ran work of the rows' processes, those with a gap in the window first.
  void AddLanes(Figure& figure) const;
  void Pad(Figure& figure) const {
    uint64_t length = std::max<uint64_t>(figure.end_ns - figure.start_ns, 1000);
    uint64_t pad = std::max<uint64_t>(length / 8, 50'000);
    figure.start_ns = figure.start_ns > pad ? figure.start_ns - pad : 0;
    figure.end_ns += pad;
  }
  // Where an activity's GPU is among the diagnosis's devices; SIZE_MAX: none of them.
  size_t DeviceOf(const GpuActivity& activity) const;
  void Gather();
  void GatherStates(uint64_t last_end);
  void GatherCalls(uint64_t last_end);
  void GatherGpu(uint64_t last_end);
  void Legend();
  void Section(const char* heading, const char* id, std::string_view prefix);
  void Picture(const Figure& figure);
  void Tables();

  const Session& session_;
  const Analysis& analysis_;
  const HtmlReportOptions& options_;
  std::unordered_map<uint32_t, std::vector<const Stall*>> stalls_by_tid_;  // in time order
  std::vector<Figure> figures_;
  std::ostringstream out_;
};

void HtmlReport::Header() {
  const SessionMeta& meta = session_.meta;
  out_ << "<h1>gprof-run report</h1>\n<p class=\"mono\">$ " << Escape(CommandLine()) << "</p>\n<p>";
  if (meta.exit_code) out_ << "exit status " << *meta.exit_code;
  if (meta.exit_signal) out_ << "killed by signal " << *meta.exit_signal;
  if (meta.end_monotonic_ns > meta.start_monotonic_ns && meta.start_monotonic_ns != 0)
    out_ << " after " << FormatDuration(meta.end_monotonic_ns - meta.start_monotonic_ns);
  out_ << "; recorded " << Plural(session_.RecordedProcessCount(), "process") << ", "
       << Plural(session_.threads.size(), "thread") << ", "
       << WithThousands(session_.api_calls.size()) << " CUDA calls, ";
  if (!session_.gpu_activities.empty())
    out_ << WithThousands(session_.gpu_activities.size()) << " GPU activities, ";
  out_ << WithThousands(session_.off_cpu.size()) << " off-CPU intervals.";
  if (!meta.cut_short_text.empty()) out_ << " " << Escape(meta.cut_short_text) << ".";
  // Processes whose CUDA calls are missing (unrecorded_processes.h), as the text report lists them.
  constexpr size_t kListed = 8;
  const auto& unrecorded = session_.unrecorded_processes;
  for (size_t i = 0; i < std::min(unrecorded.size(), kListed); ++i) {
    out_ << "<br><b>UNRECORDED</b> pid " << unrecorded[i].pid;
    if (!unrecorded[i].name.empty()) out_ << " (" << Escape(unrecorded[i].name) << ")";
    out_ << " " << Escape(unrecorded[i].reason);
  }
  if (unrecorded.size() > kListed)
    out_ << "<br><b>UNRECORDED</b> " << unrecorded.size() - kListed
         << " more processes (report.json lists them)";
  out_ << "</p>\n";
  // What is missing, each with its count (or that none could be known) and why.
  for (const LostEvents& events : session_.lost) {
    if (events.Any()) out_ << "<p><b>LOST</b> " << Escape(events.Text()) << "</p>\n";
  }
  for (const NestedSession& nested : meta.nested_sessions) {
    out_ << "<p><b>NESTED</b> " << Escape(NestedSessionText(nested)) << "</p>\n";
  }
}

std::string HtmlReport::CauseFacts(const Cause& cause) const {
  std::vector<std::string> facts;
  if (cause.gpu_idle_ns > 0) facts.push_back(CauseGpuIdleWords(cause));
  if (cause.wait_count > 0) {
    facts.push_back(CauseBlockedWords(cause) + ": " + Threads(cause.tids));
    if (cause.held_up_ns > 0) facts.push_back(CriticalPathWords(cause));
  }
  std::string text;
  for (const std::string& fact : facts) text += (text.empty() ? "" : "; ") + fact;
  return text;
}

void HtmlReport::Summary() {
  out_ << "<h2 id=\"summary\">Summary</h2>\n";
  if (!analysis_.kernel_recorded) {
    out_ << "<p>The kernel was not recorded: waits cannot be explained"
         << (session_.meta.known ? " (run as root, or give gprof-run CAP_BPF and CAP_PERFMON)"
                                 : " (no kernel.gpr)")
         << ".</p>\n";
  }
  const bool any_gpu = !analysis_.devices.empty();
  if (analysis_.causes.empty()) {
    if (analysis_.kernel_recorded)
      out_ << "<p>No contention: no thread waited "
           << FormatDuration(analysis_.options.threshold_ns)
           << " or more on a lock, the GIL, the kernel or the GPU driver"
           << (any_gpu && analysis_.gaps.empty() ? ", and no GPU was idle between its work" : "")
           << ".</p>\n";
  } else {
    out_ << "<p>" << Plural(analysis_.causes.size(), "cause") << ", ranked "
         << (any_gpu ? "by the GPU idle time they explain, then " : "")
         << "by the thread time they blocked";
    if (const size_t freezes = StallFreezes(analysis_); freezes > 0)
      out_ << "; " << Plural(freezes, "freeze") << " (threads blocked together)";
    if (!analysis_.gaps.empty()) {
      out_ << "; " << Plural(analysis_.gaps.size(), "GPU gap") << ", "
           << FormatDuration(analysis_.all_gaps.idle_ns) << " idle in all";
    }
    out_ << ".</p>\n<ol class=\"causes\">\n";
    for (size_t i = 0; i < analysis_.causes.size(); ++i) {
      const Cause& cause = analysis_.causes[i];
      out_ << "<li>";
      if (i < options_.max_causes) out_ << "<a href=\"#cause-" << cause.number << "\">";
      out_ << "<b>[" << CauseClassLabel(cause) << "]</b> "
           << Escape(CauseTitle(session_, analysis_, cause));
      if (i < options_.max_causes) out_ << "</a>";
      out_ << "<br>" << Escape(CauseFacts(cause));
      if (cause.holder_tid != 0 && cause.wait_class != WaitClass::kCpu)
        out_ << "; held by " << Escape(Thread(cause.holder_tid));
      if (cause.root)
        out_ << "<br>root: " << Escape(DescribeLink(session_, *cause.root, &analysis_.lock_users));
      out_ << "</li>\n";
    }
    out_ << "</ol>\n";
  }
}

void HtmlReport::AddChainWords(Figure& figure, const Stall& stall) const {
  for (size_t i = 0; i < stall.chain.size(); ++i) {
    const ChainLink& link = stall.chain[i];
    figure.words.push_back(
        std::string(ChainStepWords(link, i == 0)) + " " +
        DescribeLink(session_, link, &analysis_.lock_users) +
        (i + 1 == stall.chain.size() && stall.deadlock_tid == 0 ? " (root)" : ""));
  }
  if (InDeadlock(stall) || stall.deadlock_tid != 0)
    figure.words.push_back("DEADLOCK: " + DescribeDeadlock(session_, stall));
}

size_t HtmlReport::DeviceOf(const GpuActivity& activity) const {
  std::string uuid;
  if (auto process = session_.processes.find(activity.pid); process != session_.processes.end()) {
    if (auto named = process->second.device_uuids.find(activity.device_id);
        named != process->second.device_uuids.end())
      uuid = named->second;
  }
  for (size_t d = 0; d < analysis_.devices.size(); ++d) {
    const GpuDevice& device = analysis_.devices[d];
    if (!uuid.empty() ? device.uuid == uuid
                      : device.uuid.empty() && device.ordinal == activity.device_id &&
                            std::find(device.pids.begin(), device.pids.end(), activity.pid) !=
                                device.pids.end())
      return d;
  }
  return SIZE_MAX;
}

void HtmlReport::AddLanes(Figure& figure) const {
  for (const GpuGap& gap : analysis_.gaps) {
    if (figure.devices.size() >= kMaxLanes) return;
    if (gap.end_ns > figure.start_ns && gap.start_ns < figure.end_ns &&
        std::find(figure.devices.begin(), figure.devices.end(), gap.device) == figure.devices.end())
      figure.devices.push_back(gap.device);
  }
  for (uint32_t tid : figure.tids) {
    auto thread = session_.threads.find(tid);
    if (thread == session_.threads.end()) continue;
    for (size_t d = 0; d < analysis_.devices.size() && figure.devices.size() < kMaxLanes; ++d) {
      const GpuDevice& device = analysis_.devices[d];
      if (std::find(device.pids.begin(), device.pids.end(), thread->second.pid) !=
              device.pids.end() &&
          device.last_ns > figure.start_ns && device.first_ns < figure.end_ns &&
          std::find(figure.devices.begin(), figure.devices.end(), d) == figure.devices.end())
        figure.devices.push_back(d);
    }
  }
}

void HtmlReport::AddCauseFigure(size_t index) {
  const Cause& cause = analysis_.causes[index];
  Figure figure;
  figure.id = "cause-" + std::to_string(cause.number);
  figure.heading = std::to_string(cause.number) + ". [" + CauseClassLabel(cause) + "] " +
                   CauseTitle(session_, analysis_, cause);
  figure.words.push_back(CauseFacts(cause));
  AddRangeWords(figure, cause.nvtx_ranges);
  if (cause.holder_tid != 0 && cause.wait_class != WaitClass::kCpu)
    figure.words.push_back("held by " + Thread(cause.holder_tid));
  if (cause.root)
    figure.words.push_back("root: " + DescribeLink(session_, *cause.root, &analysis_.lock_users));
  // Pictured over its longest wait's freeze, else that wait, else its longest GPU gap.
  const Stall* longest =
      cause.longest_stall >= 0 ? &analysis_.stalls[cause.longest_stall] : nullptr;
  const GpuGap* gap = cause.longest_gap >= 0 ? &analysis_.gaps[cause.longest_gap] : nullptr;
  if (longest != nullptr && longest->freeze >= 0) {
    const Freeze& freeze = analysis_.freezes[longest->freeze];
    figure.start_ns = freeze.start_ns;
    figure.end_ns = freeze.end_ns;
    for (uint32_t tid : freeze.tids) AddRow(figure, tid);
    figure.words.push_back("pictured: its longest freeze, at " +
                           FormatOffset(session_, freeze.start_ns) + ", " +
                           FormatDuration(freeze.end_ns - freeze.start_ns) + ", " +
                           Plural(freeze.tids.size(), "thread"));
  } else if (longest != nullptr) {
    figure.start_ns = longest->wait.start_ns;
    figure.end_ns = longest->wait.end_ns;
    AddRow(figure, longest->tid);
    figure.words.push_back("pictured: its longest wait, " + Thread(longest->tid) + " at " +
                           FormatOffset(session_, longest->wait.start_ns) + ", asleep " +
                           FormatDuration(longest->asleep_ns()));
  } else if (gap != nullptr) {
    figure.start_ns = gap->start_ns;
    figure.end_ns = gap->end_ns;
    if (gap->late_thread) AddRow(figure, gap->late_thread->tid);
    figure.words.push_back("pictured: its longest GPU gap, at " +
                           FormatOffset(session_, gap->start_ns) + ", " +
                           FormatDuration(gap->duration()));
  } else if (cause.root) {
    figure.start_ns = cause.root->start_ns;
    figure.end_ns = cause.root->end_ns;
  } else if (auto longest_runnable = LongestRunnable(cause.tids)) {
    // Too few CPUs: its threads around the longest time one of them was ready without one.
    figure.start_ns = longest_runnable->first;
    figure.end_ns = longest_runnable->second;
    figure.words.push_back("pictured: the longest time one of them waited for a CPU, at " +
                           FormatOffset(session_, figure.start_ns) + ", " +
                           FormatDuration(figure.end_ns - figure.start_ns));
  } else {
    return;  // nothing in time to picture
  }
  if (longest != nullptr) {
    AddRow(figure, longest->tid);
    AddChainRows(figure, longest->chain);
  }
  for (uint32_t tid : cause.tids) AddRow(figure, tid);
  AddRow(figure, cause.holder_tid);
  if (cause.root) AddRow(figure, cause.root->tid);
  if (figure.tids.empty() && cause.root == std::nullopt && gap == nullptr) return;
  figure.mark_start_ns = figure.start_ns;
  figure.mark_end_ns = figure.end_ns;
  Pad(figure);
  AddLanes(figure);
  figures_.push_back(std::move(figure));
}

void HtmlReport::AddFreezeFigure(size_t index) {
  const Freeze& freeze = analysis_.freezes[index];
  Figure figure;
  figure.id = "freeze-" + std::to_string(freeze.number);
  figure.heading = "Freeze " + std::to_string(freeze.number) + ": at " +
                   FormatOffset(session_, freeze.start_ns) + ", " +
                   FormatDuration(freeze.end_ns - freeze.start_ns) + ", " +
                   Plural(freeze.tids.size(), "thread");
  figure.words.push_back(Threads(freeze.tids, 8));
  AddRangeWords(figure, freeze.nvtx_ranges);
  if (freeze.cause >= 0) {
    const Cause& cause = analysis_.causes[freeze.cause];
    figure.words.push_back("all waited on " + CauseTitle(session_, analysis_, cause) + " [" +
                           CauseClassLabel(cause) + "], cause " + std::to_string(cause.number));
  }
  figure.start_ns = figure.mark_start_ns = freeze.start_ns;
  figure.end_ns = figure.mark_end_ns = freeze.end_ns;
  for (uint32_t tid : freeze.tids) AddRow(figure, tid);
  if (freeze.longest_stall >= 0) {
    const Stall* longest = &analysis_.stalls[freeze.longest_stall];
    figure.words.push_back("longest: " + Thread(longest->tid) + " asleep " +
                           FormatDuration(longest->asleep_ns()) +
                           (longest->call != nullptr ? " in " + session_.ApiName(*longest->call)
                                                     : std::string()));
    AddChainWords(figure, *longest);
  }
  for (int s : freeze.stalls) AddChainRows(figure, analysis_.stalls[s].chain);
  Pad(figure);
  AddLanes(figure);
  figures_.push_back(std::move(figure));
}

void HtmlReport::AddGapFigure(size_t index) {
  const GpuGap& gap = analysis_.gaps[index];
  Figure figure;
  figure.id = "gap-" + std::to_string(index + 1);
  figure.heading = "GPU gap " + std::to_string(index + 1) + ": at " +
                   FormatOffset(session_, gap.start_ns) + ", " + FormatDuration(gap.duration()) +
                   ", " + GpuDeviceName(analysis_.devices[gap.device], analysis_.devices);
  std::string between = "after " + ShortCppName(GpuActivityName(session_, *gap.before));
  if (gap.before_call != nullptr) between += " (launched by " + Thread(gap.before_call->tid) + ")";
  between += ", before " + ShortCppName(GpuActivityName(session_, *gap.after));
  if (gap.after_call != nullptr)
    between += " (launched by " + Thread(gap.after_call->tid) + " in " +
               session_.ApiName(*gap.after_call) + " at " +
               FormatOffset(session_, gap.after_call->enter_ns) + ")";
  figure.words.push_back(between);
  figure.words.push_back(GapWaitWords(session_, gap, &analysis_.lock_users));
  AddRangeWords(figure, gap.nvtx_ranges);
  if (!gap.gpu_side && gap.late_thread && gap.module_load_ns > 0)
    figure.words.push_back(ModuleLoadWords(gap));
  if (gap.cause >= 0)
    figure.words.push_back("cause " + std::to_string(analysis_.causes[gap.cause].number));
  figure.start_ns = figure.mark_start_ns = gap.start_ns;
  figure.end_ns = figure.mark_end_ns = gap.end_ns;
  if (gap.late_thread) AddRow(figure, gap.late_thread->tid);
  if (gap.after_call != nullptr) AddRow(figure, gap.after_call->tid);
  if (gap.stall >= 0) {
    const Stall& stall = analysis_.stalls[gap.stall];
    AddRow(figure, stall.tid);
    AddChainRows(figure, stall.chain);
    AddChainWords(figure, stall);
  }
  if (gap.before_call != nullptr) AddRow(figure, gap.before_call->tid);
  figure.devices.push_back(gap.device);
  Pad(figure);
  AddLanes(figure);
  figures_.push_back(std::move(figure));
}

void HtmlReport::MakeFigures() {
  for (size_t i = 0; i < std::min(options_.max_causes, analysis_.causes.size()); ++i)
    AddCauseFigure(i);
  // The longest freezes, numbered as every output numbers them; the longest gaps, numbered by
  // their place in time as report.json lists them.
  size_t freezes = 0;
  for (int f : analysis_.freezes_by_number) {
    if (freezes == options_.max_freezes) break;
    if (!analysis_.freezes[f].of_stalls()) continue;
    AddFreezeFigure(f);
    ++freezes;
  }
  const std::vector<int> gaps = GapsLongestFirst(analysis_);
  for (size_t i = 0; i < std::min(options_.max_gaps, gaps.size()); ++i) AddGapFigure(gaps[i]);
}

// One pass over each kind of record fills every picture: the records are in time order, the
// pictures few.
void HtmlReport::Gather() {
  if (figures_.empty()) return;
  uint64_t last_end = 0;
  for (Figure& figure : figures_) {
    figure.rows.resize(figure.tids.size());
    figure.lanes.resize(figure.devices.size());
    last_end = std::max(last_end, figure.end_ns);
  }
  GatherStates(last_end);
  GatherCalls(last_end);
  GatherGpu(last_end);
}

// The rows' states: asleep (coloured by the class of the stall, where it was one), runnable.
void HtmlReport::GatherStates(uint64_t last_end) {
  for (const OffCpuInterval& interval : session_.off_cpu) {
    if (interval.start_ns >= last_end) break;
    for (Figure& figure : figures_) {
      if (!figure.Overlaps(interval.start_ns, interval.end_ns)) continue;
      int row = figure.RowOf(interval.tid);
      if (row < 0) continue;
      std::vector<Figure::Segment>& states = figure.rows[row].states;
      if (interval.state() == OffCpuState::kRunnable) {
        AddSegment(states,
                   {interval.start_ns, interval.end_ns, ClassCss(WaitClass::kCpu),
                    "preempted, waiting for a CPU " + FormatDuration(interval.duration())},
                   figure);
        continue;
      }
      uint64_t asleep_end = interval.wake_ns != 0 && interval.wake_ns < interval.end_ns
                                ? std::max(interval.wake_ns, interval.start_ns)
                                : interval.end_ns;
      const Stall* stall = nullptr;
      if (auto it = stalls_by_tid_.find(interval.tid); it != stalls_by_tid_.end()) {
        auto at = std::lower_bound(
            it->second.begin(), it->second.end(), interval.start_ns,
            [](const Stall* s, uint64_t time) { return s->wait.start_ns < time; });
        if (at != it->second.end() && (*at)->wait.start_ns < interval.end_ns) stall = *at;
      }
      std::string title = "asleep " + FormatDuration(asleep_end - interval.start_ns);
      if (stall != nullptr) {
        title += " " + WhereAsleep(session_, stall->wait.object) + " [" +
                 WaitClassName(stall->wait_class) + "]";
        if (stall->call != nullptr) title += " in " + session_.ApiName(*stall->call);
      }
      AddSegment(states,
                 {interval.start_ns, asleep_end,
                  stall != nullptr ? ClassCss(stall->wait_class) : "w-short", std::move(title)},
                 figure);
      if (asleep_end < interval.end_ns)
        AddSegment(states,
                   {asleep_end, interval.end_ns, ClassCss(WaitClass::kCpu),
                    "woken, waiting for a CPU " + FormatDuration(interval.end_ns - asleep_end)},
                   figure);
    }
  }
}

// The rows' CUDA calls.
void HtmlReport::GatherCalls(uint64_t last_end) {
  for (const ApiCall& call : session_.api_calls) {
    if (call.enter_ns >= last_end) break;
    for (Figure& figure : figures_) {
      if (!figure.Overlaps(call.enter_ns, call.exit_ns)) continue;
      int row = figure.RowOf(call.tid);
      if (row < 0) continue;
      AddSegment(figure.rows[row].calls,
                 {call.enter_ns, call.exit_ns, "call",
                  session_.ApiName(call) + " " + FormatDuration(call.duration())},
                 figure);
    }
  }
}

// The GPU lanes: their activities merged into busy stretches, each titled with its longest.
void HtmlReport::GatherGpu(uint64_t last_end) {
  if (analysis_.devices.empty()) return;
  auto close_stretch = [&](Figure::Lane& lane) {
    if (lane.busy.empty() || lane.longest == nullptr) return;
    lane.busy.back().title = "busy " +
                             FormatDuration(lane.busy.back().end_ns - lane.busy.back().start_ns) +
                             ": " + Plural(lane.count, "activity") + ", the longest " +
                             ShortCppName(GpuActivityName(session_, *lane.longest)) + " " +
                             FormatDuration(lane.longest->duration());
    lane.longest = nullptr;
    lane.count = 0;
  };
  size_t cached_key_pid = 0, cached_key_device = 0, cached = SIZE_MAX;
  for (const GpuActivity& activity : session_.gpu_activities) {
    if (activity.start_ns >= last_end) break;
    if (!activity.occupies_gpu()) continue;
    size_t device;
    if (cached != SIZE_MAX && activity.pid == cached_key_pid &&
        activity.device_id == cached_key_device) {
      device = cached;
    } else {
      device = DeviceOf(activity);
      cached_key_pid = activity.pid;
      cached_key_device = activity.device_id;
      cached = device;
    }
    if (device == SIZE_MAX) continue;
    for (Figure& figure : figures_) {
      if (!figure.Overlaps(activity.start_ns, activity.end_ns)) continue;
      auto at = std::find(figure.devices.begin(), figure.devices.end(), device);
      if (at == figure.devices.end()) continue;
      Figure::Lane& lane = figure.lanes[at - figure.devices.begin()];
      if (!lane.busy.empty() && activity.start_ns <= lane.busy.back().end_ns) {
        lane.busy.back().end_ns = std::max(lane.busy.back().end_ns, activity.end_ns);
      } else {
        close_stretch(lane);
        if (lane.busy.size() >= kMaxSegmentsPerRow) continue;
        lane.busy.push_back({activity.start_ns, activity.end_ns, "busy", ""});
      }
      ++lane.count;
      if (lane.longest == nullptr || activity.duration() > lane.longest->duration())
        lane.longest = &activity;
    }
  }
  for (Figure& figure : figures_) {
    for (Figure::Lane& lane : figure.lanes) close_stretch(lane);
  }
}

// Whether a thread existed at some time in [start, end).
bool Alive(const Session& session, uint32_t tid, uint64_t start_ns, uint64_t end_ns) {
  auto thread = session.threads.find(tid);
  if (thread == session.threads.end()) return true;  // not seen starting or exiting
  return (thread->second.start_ns == 0 || thread->second.start_ns < end_ns) &&
         (thread->second.exit_ns == 0 || thread->second.exit_ns > start_ns);
}

// Rows of threads that did not exist in the picture's window and left nothing in it go: a
// cause may name threads of other times.
void DropEmptyRows(const Session& session, Figure& figure) {
  std::vector<uint32_t> tids;
  std::vector<Figure::Row> rows;
  for (size_t r = 0; r < figure.tids.size(); ++r) {
    if (figure.rows[r].states.empty() && figure.rows[r].calls.empty() &&
        !Alive(session, figure.tids[r], figure.start_ns, figure.end_ns))
      continue;
    tids.push_back(figure.tids[r]);
    rows.push_back(std::move(figure.rows[r]));
  }
  figure.tids = std::move(tids);
  figure.rows = std::move(rows);
}

void HtmlReport::Legend() {
  for (Figure& figure : figures_) DropEmptyRows(session_, figure);
  if (figures_.empty()) return;
  // The legend names only what the pictures show.
  std::set<std::string_view> drawn;
  for (const Figure& figure : figures_) {
    for (const Figure::Row& row : figure.rows) {
      for (const Figure::Segment& segment : row.states) drawn.insert(segment.css);
      if (!row.calls.empty()) drawn.insert("call");
    }
  }
  out_ << "<h2 id=\"pictures\">Pictures</h2>\n<p>Each picture shows the threads involved on one "
          "time axis: a row per thread, green while it ran, coloured by class while it waited "
          "(the dark band above a row: its CUDA calls); arrows go from a waiter to the thread "
          "that released it; "
       << (analysis_.devices.empty() ? ""
                                      : "a lane per GPU, blue while busy, pink while idle (a red "
                                        "outline: a gap the report explains); ")
       << "the event pictured is shaded yellow. Hover for details.</p>"
          "\n<p class=\"legend\"><span class=\"sw run\"></span>running";
  for (WaitClass wait_class : kAllClasses) {
    if (drawn.contains(ClassCss(wait_class)))
      out_ << "<span class=\"sw " << ClassCss(wait_class) << "\"></span>"
           << WaitClassName(wait_class);
  }
  if (drawn.contains("w-short"))
    out_ << "<span class=\"sw w-short\"></span>asleep under "
         << FormatDuration(analysis_.options.threshold_ns);
  if (drawn.contains("call")) out_ << "<span class=\"sw call\"></span>CUDA call";
  if (!analysis_.devices.empty())
    out_ << "<span class=\"sw busy\"></span>GPU busy<span class=\"sw idle\"></span>GPU idle";
  out_ << "</p>\n";
}

void HtmlReport::Section(const char* heading, const char* id, std::string_view prefix) {
  bool any = false;
  for (const Figure& figure : figures_) {
    if (!std::string_view(figure.id).starts_with(prefix)) continue;
    if (!any) out_ << "<h2 id=\"" << id << "\">" << heading << "</h2>\n";
    any = true;
    out_ << "<h3 id=\"" << figure.id << "\">" << Escape(figure.heading) << "</h3>\n"
         << "<div class=\"fig\">";
    Picture(figure);
    out_ << "<div class=\"words\">";
    for (const std::string& line : figure.words) out_ << "<p>" << Escape(line) << "</p>";
    out_ << "</div></div>\n";
  }
}

void HtmlReport::Picture(const Figure& figure) {
  const int rows = static_cast<int>(figure.tids.size());
  const int lanes = static_cast<int>(figure.devices.size());
  const int height = kTop + rows * kRowPitch + lanes * kRowPitch + 8;
  const double span = static_cast<double>(figure.end_ns - figure.start_ns);
  auto x = [&](uint64_t t) {
    t = std::clamp(t, figure.start_ns, figure.end_ns);
    return kLeft + (t - figure.start_ns) * kPlotWidth / span;
  };
  char number[64];
  auto rect = [&](uint64_t start, uint64_t end, double y, double h, const char* css,
                  const std::string& title) {
    double x0 = x(start), x1 = x(end);
    snprintf(number, sizeof(number), "x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\"", x0, y,
             std::max(x1 - x0, 0.6), h);
    out_ << "<rect class=\"" << css << "\" " << number << ">";
    if (!title.empty()) out_ << "<title>" << Escape(title) << "</title>";
    out_ << "</rect>";
  };
  out_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" data-figure=\""
       << figure.id << "\" width=\"" << kWidth << "\" height=\"" << height << "\" viewBox=\"0 0 "
       << kWidth << " " << height << "\" role=\"img\">"
       << "<defs><marker id=\"head-" << figure.id
       << "\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
          "orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\"/></marker></defs>";
  // The event, shaded behind everything.
  rect(figure.mark_start_ns, figure.mark_end_ns, kTop - 4, height - kTop, "mark", "");
  // The time axis: about six ticks at 1, 2 or 5 times a power of ten, as offsets in the session.
  double step = std::pow(10.0, std::floor(std::log10(std::max(span / 6, 1.0))));
  for (double factor : {2.0, 5.0, 10.0}) {
    if (span / step <= 8) break;
    step = std::pow(10.0, std::floor(std::log10(std::max(span / 6, 1.0)))) * factor;
  }
  const uint64_t origin = SessionOrigin(session_);
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / 1e9))), 0, 9);
  out_ << "<line class=\"axis\" x1=\"" << kLeft << "\" y1=\"" << kTop - 8 << "\" x2=\""
       << kLeft + kPlotWidth << "\" y2=\"" << kTop - 8 << "\"/>";
  const double first =
      std::ceil((static_cast<double>(figure.start_ns) - origin) / step) * step + origin;
  for (double t = first; t <= figure.end_ns; t += step) {
    double at = x(static_cast<uint64_t>(t));
    snprintf(number, sizeof(number), "%+.*f s", decimals, (t - origin) / 1e9);
    out_ << "<line class=\"axis\" x1=\"" << at << "\" y1=\"" << kTop - 11 << "\" x2=\"" << at
         << "\" y2=\"" << kTop - 5 << "\"/><text class=\"tick\" x=\"" << at + 2 << "\" y=\""
         << kTop - 12 << "\">" << number << "</text>";
  }
  auto row_y = [&](int row) { return kTop + row * kRowPitch + 8; };  // the row's bar, below calls
  const bool recorded = analysis_.kernel_recorded;
  for (int r = 0; r < rows; ++r) {
    const uint32_t tid = figure.tids[r];
    const Figure::Row& row = figure.rows[r];
    const double y = row_y(r);
    std::string label = Thread(tid);
    out_ << "<text class=\"label\" x=\"4\" y=\"" << y + 12 << "\">" << Escape(Shortened(label, 28))
         << "<title>" << Escape(label) << "</title></text>";
    uint64_t life_start = figure.start_ns, life_end = figure.end_ns;
    if (auto thread = session_.threads.find(tid); thread != session_.threads.end()) {
      if (thread->second.start_ns != 0) life_start = std::max(life_start, thread->second.start_ns);
      if (thread->second.exit_ns != 0) life_end = std::min(life_end, thread->second.exit_ns);
    }
    if (recorded && life_end > life_start)
      rect(life_start, life_end, y, kRowHeight, "run", "running (on a CPU)");
    for (const Figure::Segment& segment : row.states)
      rect(segment.start_ns, segment.end_ns, y, kRowHeight, segment.css, segment.title);
    for (const Figure::Segment& segment : row.calls)
      rect(segment.start_ns, segment.end_ns, y - 7, 5, segment.css, segment.title);
  }
  for (int l = 0; l < lanes; ++l) {
    const size_t d = figure.devices[l];
    const GpuDevice& device = analysis_.devices[d];
    const double y = row_y(rows + l);
    std::string label = GpuDeviceName(device, analysis_.devices);
    out_ << "<text class=\"label\" x=\"4\" y=\"" << y + 12 << "\">" << Escape(Shortened(label, 28))
         << "<title>" << Escape(label) << "</title></text>";
    if (device.last_ns > figure.start_ns && device.first_ns < figure.end_ns)
      rect(std::max(device.first_ns, figure.start_ns), std::min(device.last_ns, figure.end_ns), y,
           kRowHeight, "idle", "idle: ran nothing");
    for (const Figure::Segment& segment : figure.lanes[l].busy)
      rect(segment.start_ns, segment.end_ns, y, kRowHeight, segment.css, segment.title);
    for (size_t g = 0; g < analysis_.gaps.size(); ++g) {
      const GpuGap& gap = analysis_.gaps[g];
      if (gap.device != d || !figure.Overlaps(gap.start_ns, gap.end_ns)) continue;
      rect(gap.start_ns, gap.end_ns, y - 1, kRowHeight + 2, "gap",
           "gap " + std::to_string(g + 1) + ": the GPU ran nothing for " +
               FormatDuration(gap.duration()) +
               (gap.cause >= 0 ? ", cause " + std::to_string(analysis_.causes[gap.cause].number)
                               : std::string()));
    }
  }
  // Arrows last, over the rows: from each waiter to the thread that released it.
  size_t arrows = 0;
  for (int r = 0; r < rows && arrows < kMaxArrows; ++r) {
    auto stalls = stalls_by_tid_.find(figure.tids[r]);
    if (stalls == stalls_by_tid_.end()) continue;
    for (const Stall* stall : stalls->second) {
      if (arrows >= kMaxArrows) break;
      const uint64_t wake = stall->wait.wake_ns != 0 ? stall->wait.wake_ns : stall->wait.end_ns;
      if (wake < figure.start_ns || wake >= figure.end_ns) continue;
      const uint32_t releaser = !stall->chain.empty() ? stall->chain.front().tid
                                                      : stall->wait.waker_tid;
      const int to = releaser != 0 ? figure.RowOf(releaser) : -1;
      if (to < 0 || to == r) continue;
      const double at = x(wake);
      const double y0 = row_y(r) + kRowHeight / 2.0, y1 = row_y(to) + kRowHeight / 2.0;
      snprintf(number, sizeof(number), "x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"", at, y0,
               at, y1 + (y1 > y0 ? -5 : 5));
      out_ << "<line class=\"arrow\" " << number << " marker-end=\"url(#head-" << figure.id
           << ")\"><title>" << Escape(Thread(figure.tids[r]) + " waited for " + Thread(releaser) +
                                      ", which released it at " + FormatOffset(session_, wake))
           << "</title></line>";
      ++arrows;
    }
  }
  out_ << "</svg>";
}

void HtmlReport::Tables() {
  // The rows report.txt and report.json have (report_tables.h): one set of figures everywhere.
  auto head = [&](const char* heading, const char* id, bool with_blocked) {
    out_ << "<h2 id=\"" << id << "\">" << heading << "</h2>\n<table><tr><th>name</th>"
         << "<th>count</th><th>total</th><th>median</th><th>max</th>"
         << (with_blocked ? "<th>blocked</th>" : "") << "</tr>\n";
  };
  auto row = [&](const std::string& name, const std::string& shown, uint64_t count,
                 uint64_t total_ns, uint64_t median_ns, uint64_t max_ns) {
    out_ << "<tr><td class=\"mono\" title=\"" << Escape(name) << "\">" << Escape(shown)
         << "</td><td class=\"n\">" << WithThousands(count) << "</td><td class=\"n\">"
         << FormatDuration(total_ns) << "</td><td class=\"n\">" << FormatDuration(median_ns)
         << "</td><td class=\"n\">" << FormatDuration(max_ns) << "</td>";
  };
  auto tail = [&](size_t rows) {
    out_ << "</table>\n";
    if (rows > options_.max_table_rows)
      out_ << "<p>" << rows - options_.max_table_rows << " more in report.json.</p>\n";
  };
  std::vector<ApiCallRow> api = ApiCallTable(session_);
  if (!api.empty()) {
    head("CUDA API calls by name", "api", true);
    for (size_t i = 0; i < std::min(api.size(), options_.max_table_rows); ++i) {
      row(api[i].name, api[i].name, api[i].count, api[i].total_ns, api[i].median_ns,
          api[i].max_ns);
      out_ << "<td class=\"n\">" << FormatDuration(api[i].blocked_ns) << "</td></tr>\n";
    }
    tail(api.size());
    out_ << "<p>blocked: time asleep inside the calls (off CPU and not runnable).</p>\n";
  }
  std::vector<KernelRow> kernels = KernelTable(session_);
  if (!kernels.empty()) {
    head("GPU kernels by name", "kernels", false);
    for (size_t i = 0; i < std::min(kernels.size(), options_.max_table_rows); ++i) {
      row(kernels[i].name, ShortCppName(kernels[i].name), kernels[i].count, kernels[i].total_ns,
          kernels[i].median_ns, kernels[i].max_ns);
      out_ << "</tr>\n";
    }
    tail(kernels.size());
  }
  if (!analysis_.ranges.empty()) {
    out_ << "<h2 id=\"ranges\">Ranges (NVTX) by name</h2>\n<table><tr><th>name</th>"
         << "<th>count</th><th>total</th><th>blocked</th><th>GPU idle</th></tr>\n";
    for (size_t i = 0; i < std::min(analysis_.ranges.size(), options_.max_table_rows); ++i) {
      const RangeTotals& range = analysis_.ranges[i];
      out_ << "<tr><td class=\"mono\">" << Escape(RangeName(session_, range.name, range.domain))
           << "</td><td class=\"n\">" << WithThousands(range.count) << "</td><td class=\"n\">"
           << FormatDuration(range.total_ns) << "</td><td class=\"n\">"
           << FormatDuration(range.blocked_ns) << "</td><td class=\"n\">"
           << FormatDuration(range.gpu_idle_ns) << "</td></tr>\n";
    }
    tail(analysis_.ranges.size());
    out_ << "<p>blocked: time its thread slept inside the ranges; GPU idle: its process's GPU "
            "gaps inside them.</p>\n";
  }
}

}  // namespace

std::string RenderHtmlReport(const Session& session, const Analysis& analysis,
                             std::string_view text_report, const HtmlReportOptions& options) {
  return HtmlReport(session, analysis, options).Render(text_report);
}

}  // namespace gprof::collector
