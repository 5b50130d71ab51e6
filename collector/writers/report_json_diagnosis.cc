#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collector/analysis/wait_class.h"
#include "collector/symbols/python_frames.h"
#include "collector/symbols/user_symbols.h"
#include "collector/writers/report.h"
#include "collector/writers/report_json_parts.h"
#include "collector/writers/report_tables.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/words/kernel_names.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"

namespace gprof::collector::report_json {

const char* LinkStateName(ChainLink::State state) {
  switch (state) {
    case ChainLink::State::kAsleep:
      return "asleep";
    case ChainLink::State::kOnCpu:
      return "on_cpu";
    case ChainLink::State::kRunnable:
      return "runnable";
    case ChainLink::State::kGpu:
      return "waiting_for_gpu";
    case ChainLink::State::kExited:
      return "exited";
  }
  return "unknown";
}

const char* LinkFoundAs(const ChainLink& link) {
  if (link.creator) return "creator";
  return link.owner ? "lock_owner" : "waker";
}

// The distinct Python stacks sampled on `tid` in [start, end), most often first, with their
// counts: what an on-CPU thread was running.
json PythonSamplesJson(const Session& session, uint32_t tid, uint64_t start_ns, uint64_t end_ns) {
  constexpr size_t kShown = 3;
  std::vector<const PythonStack*> samples = session.python.Samples(tid, start_ns, end_ns);
  std::vector<std::pair<size_t, const PythonStack*>> counted;  // count, an example
  for (const PythonStack* sample : samples) {
    auto same = std::find_if(counted.begin(), counted.end(), [&](const auto& entry) {
      return entry.second->frames == sample->frames;
    });
    if (same == counted.end()) {
      counted.emplace_back(1, sample);
    } else {
      ++same->first;
    }
  }
  std::stable_sort(counted.begin(), counted.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  json out = json::array();
  for (size_t i = 0; i < std::min(kShown, counted.size()); ++i) {
    out.push_back(Object(
        {{"count", counted[i].first}, {"stack", PythonStackJson(session, counted[i].second)}}));
  }
  return Object({{"samples", samples.size()}, {"stacks", std::move(out)}});
}

json LinkJson(const Session& session, const ChainLink& link) {
  return Object(
      {{"thread", ThreadRef(session, link.tid)},
       {"found_as", LinkFoundAs(link)},
       {"released", link.released},
       {"created_ns", link.created_ns != 0 ? json(link.created_ns) : json(nullptr)},
       {"start_ns", link.start_ns},
       {"end_ns", link.end_ns},
       {"state", LinkStateName(link.state)},
       {"on_cpu_ns", link.on_cpu_ns},
       {"asleep_ns", link.asleep_ns},
       {"runnable_ns", link.runnable_ns},
       {"call", CallJson(session, link.call)},
       {"call_ns", link.call_ns},
       {"other_calls_ns", link.other_calls_ns},
       {"other_calls", link.other_calls},
       {"longest_other_call", CallJson(session, link.longest_other_call)},
       {"wait", link.wait ? WaitJson(session, *link.wait) : json(nullptr)},
       {"wait_class", link.wait ? json(WaitClassName(link.wait_class)) : json(nullptr)},
       {"gpu_activity", ActivityJson(session, link.gpu_activity)},
       {"memory_call", MemoryMapCallJson(link.memory_call)},
       {"on_cpu", link.state == ChainLink::State::kOnCpu ? OnCpuJson(link.ran) : json(nullptr)},
       {"python_samples", session.python.empty()
                              ? json(nullptr)
                              : PythonSamplesJson(session, link.tid, link.start_ns, link.end_ns)},
       {"text", DescribeLink(session, link)}});
}

json StallJson(const Session& session, const Stall& stall) {
  json chain = json::array();
  for (const ChainLink& link : stall.chain) chain.push_back(LinkJson(session, link));
  return Object({{"thread", ThreadRef(session, stall.tid)},
                 {"class", WaitClassName(stall.wait_class)},
                 {"wait", WaitJson(session, stall.wait)},
                 {"asleep_ns", stall.asleep_ns()},
                 {"call", CallJson(session, stall.call)},
                 {"chain", std::move(chain)},
                 {"deadlock_with",
                  stall.deadlock_tid != 0 ? ThreadRef(session, stall.deadlock_tid) : json(nullptr)},
                 {"profiler_thread",
                  stall.profiler_tid != 0 ? ThreadRef(session, stall.profiler_tid) : json(nullptr)},
                 {"profiler_cost", stall.profiler_cost},
                 {"on_critical_path", stall.on_critical_path},
                 {"joined_on_critical_path", stall.joined_on_critical_path},
                 {"cause", IndexOrNull(stall.cause)},
                 {"freeze", IndexOrNull(stall.freeze)}});
}

const char* CauseKindName(CauseKind kind) {
  switch (kind) {
    case CauseKind::kObject:
      return "object";
    case CauseKind::kCpu:
      return "cpu";
    case CauseKind::kGpuSide:
      return "gpu_side";
    case CauseKind::kModuleLoad:
      return "module_load";
    case CauseKind::kLateHost:
      return "late_host";
    case CauseKind::kHandoff:
      return "handoff";
  }
  return "object";
}

// The causes, ranked.
json CausesJson(const Session& session, const Analysis& diagnosis) {
  json causes = json::array();
  for (const Cause& cause : diagnosis.causes) {
    json threads = json::array();
    for (uint32_t tid : cause.tids) threads.push_back(ThreadRef(session, tid));
    causes.push_back(
        {{"class", WaitClassName(cause.wait_class)},
         {"label", CauseClassLabel(cause)},
         {"kind", CauseKindName(cause.kind)},
         {"identity", CauseIdentity(session, cause)},
         {"title", CauseTitle(session, diagnosis, cause)},
         {"object",
          cause.wait_class == WaitClass::kCpu ? json(nullptr) : ObjectJson(session, cause.object)},
         {"holder", cause.holder_tid != 0 ? ThreadRef(session, cause.holder_tid) : json(nullptr)},
         {"root", cause.root ? LinkJson(session, *cause.root) : json(nullptr)},
         {"gpu_idle_ns", cause.gpu_idle_ns},
         {"blocked_ns", cause.blocked_ns},
         {"held_up_ns", cause.held_up_ns},
         {"longest_ns", cause.longest_ns},
         {"wait_count", cause.wait_count},
         {"threads", std::move(threads)},
         {"stalls", cause.stalls},
         {"freezes", cause.freezes},
         {"gaps", cause.gaps},
         {"nvtx", InRangesJson(session, cause.nvtx_ranges)}});
  }
  return causes;
}

// The stalls' freezes, in order of their start (the top level has the others).
json StallFreezesJson(const Session& session, const Analysis& diagnosis) {
  json freezes = json::array();
  for (const Freeze& freeze : diagnosis.freezes) {
    if (!freeze.of_stalls()) break;  // those only slow calls saw are the top level's
    json threads = json::array();
    for (uint32_t tid : freeze.tids) threads.push_back(ThreadRef(session, tid));
    freezes.push_back({{"number", freeze.number},
                       {"start_ns", freeze.start_ns},
                       {"end_ns", freeze.end_ns},
                       {"threads", std::move(threads)},
                       {"stalls", freeze.stalls},
                       {"cause", IndexOrNull(freeze.cause)},
                       {"nvtx", InRangesJson(session, freeze.nvtx_ranges)}});
  }
  return freezes;
}

// The GPU gaps, in time order.
json GapsJson(const Session& session, const Analysis& diagnosis) {
  json gaps = json::array();
  for (const GpuGap& gap : diagnosis.gaps) {
    gaps.push_back(
        {{"pid", gap.pid},
         {"device", gap.device_id},
         {"device_index", gap.device},
         {"stream", gap.stream_id},
         {"start_ns", gap.start_ns},
         {"end_ns", gap.end_ns},
         {"before", ActivityJson(session, gap.before)},
         {"after", ActivityJson(session, gap.after)},
         {"before_call", CallJson(session, gap.before_call)},
         {"after_call", CallJson(session, gap.after_call)},
         {"late_thread", gap.late_thread ? LinkJson(session, *gap.late_thread) : json(nullptr)},
         {"stall", IndexOrNull(gap.stall)},
         {"module_load_ns", gap.module_load_ns},
         {"gpu_side", gap.gpu_side},
         {"profiler_cost", gap.profiler_cost},
         {"cause", IndexOrNull(gap.cause)},
         {"nvtx", InRangesJson(session, gap.nvtx_ranges)}});
  }
  return gaps;
}

// The threads that waited for a CPU, longest first.
json CpuWaitsJson(const Session& session, const Analysis& diagnosis) {
  json cpu_waits = json::array();
  for (const CpuWait& wait : diagnosis.cpu_waits) {
    json held_up_by = json::array();
    for (const auto& [tid, ns] : wait.held_up_by)
      held_up_by.push_back({{"thread", ThreadRef(session, tid)}, {"runnable_ns", ns}});
    cpu_waits.push_back({{"thread", ThreadRef(session, wait.tid)},
                         {"runnable_ns", wait.runnable_ns},
                         {"life_ns", wait.life_ns},
                         {"after_wakeup_ns", wait.after_wakeup_ns},
                         {"longest_after_wakeup_ns", wait.longest_after_wakeup_ns},
                         {"wakeups", wait.wakeups},
                         {"awaited_ns", wait.awaited_ns},
                         {"held_up_ns", wait.held_up_ns},
                         {"held_up_by", std::move(held_up_by)},
                         {"short_of_cpu", wait.short_of_cpu},
                         {"latency_sensitive", wait.latency_sensitive}});
  }
  return cpu_waits;
}

// Per GPU (in the order of gpu.devices): its idle time, the part in gaps, the part explained.
json DevicesJson(const Analysis& diagnosis) {
  json devices = json::array();
  for (size_t d = 0; d < diagnosis.devices.size(); ++d) {
    const GpuDevice& device = diagnosis.devices[d];
    const GapTotals& gaps = diagnosis.gap_totals[d];
    devices.push_back({{"device", device.ordinal},
                       {"name", GpuDeviceName(device, diagnosis.devices)},
                       {"idle_ns", device.idle_ns()},
                       {"gaps", gaps.gaps},
                       {"gap_idle_ns", gaps.idle_ns},
                       {"explained_idle_ns", gaps.explained_ns}});
  }
  return devices;
}

// What gprof-run's own threads cost the program: never in the causes.
json ProfilerCostJson(const Session& session, const Analysis& diagnosis) {
  const ProfilerCost& cost = diagnosis.profiler_cost;
  json profiler_threads = json::array();
  for (uint32_t tid : cost.tids) {
    // As the injected library said, or a thread one of them created.
    auto known = session.profiler_threads.find(tid);
    const char* role = "created_by_profiler";
    if (known != session.profiler_threads.end())
      role = known->second == ProfilerRole::kWriter  ? "writer"
             : known->second == ProfilerRole::kCupti ? "cupti"
                                                     : "other";
    profiler_threads.push_back({{"thread", ThreadRef(session, tid)}, {"role", role}});
  }
  std::string cost_text = DescribeProfilerCost(session, diagnosis);
  json profiler_cost = {
      {"threads", std::move(profiler_threads)},
      {"waits", cost.stalls.size()},
      {"stalls", cost.stalls},
      {"total_ns", cost.total_ns},
      {"longest_ns", cost.longest >= 0 ? diagnosis.stalls[cost.longest].asleep_ns() : 0},
      {"longest", IndexOrNull(cost.longest)},
      {"gpu_idle_ns", cost.gpu_idle_ns},
      {"gaps", cost.gaps},
      {"text", cost_text.empty() ? json(nullptr) : json(cost_text)}};
  return profiler_cost;
}

json DiagnosisJson(const Session& session, const Analysis& diagnosis, Arrays arrays) {
  json stalls = json::array();
  if (arrays == Arrays::kFilled) {
    for (const Stall& stall : diagnosis.stalls) stalls.push_back(StallJson(session, stall));
  }
  return {{"kernel_recorded", diagnosis.kernel_recorded},
          {"wait_threshold_ns", diagnosis.options.threshold_ns},
          {"gap_threshold_ns", diagnosis.options.gap_threshold_ns},
          {"profiler_cost", ProfilerCostJson(session, diagnosis)},
          {"devices", DevicesJson(diagnosis)},
          {"causes", CausesJson(session, diagnosis)},
          {"freezes", StallFreezesJson(session, diagnosis)},
          {"gaps", GapsJson(session, diagnosis)},
          {"cpu_waits", CpuWaitsJson(session, diagnosis)},
          {"stalls", std::move(stalls)}};
}

}  // namespace gprof::collector::report_json
