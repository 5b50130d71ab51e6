#include "collector/writers/perfetto/short_wait_counters.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "collector/model/value_format.h"

namespace gprof::collector::perfetto {

void WriteCountedWaits(const Session& session, TrackRegistry& tracks, PacketWriter& packets) {
  // What the long-run guard leaves out of the slices is counted here too, by the second.
  std::map<std::tuple<uint32_t, CountedWaits::Kind, uint64_t>, CountedWaits> left_out;
  auto leave_out = [&](CountedWaits::Kind kind, uint32_t pid, uint32_t tid, uint64_t start_ns,
                       uint64_t end_ns) {
    CountedWaits& counted = left_out[{tid, kind, start_ns / 1'000'000'000}];
    if (counted.count++ == 0) counted.kind = kind, counted.pid = pid, counted.tid = tid;
    counted.start_ns = counted.start_ns == 0 ? start_ns : std::min(counted.start_ns, start_ns);
    counted.end_ns = std::max(counted.end_ns, end_ns);
    counted.total_ns += end_ns - start_ns;
  };
  if (const uint64_t under = session.trace_detail_under_ns; under != 0) {
    for (const OffCpuInterval& interval : session.off_cpu) {
      if (interval.duration() < under)
        leave_out(CountedWaits::Kind::kOffCpu, interval.pid, interval.tid, interval.start_ns,
                  interval.end_ns);
    }
    for (const FutexCall& call : session.futex_calls) {
      if (call.duration() < under)
        leave_out(CountedWaits::Kind::kFutex, call.pid, call.tid, call.start_ns, call.end_ns);
    }
  }
  if (session.counted_waits.empty() && left_out.empty()) return;
  std::map<uint32_t, std::vector<const CountedWaits*>> by_thread;
  for (const CountedWaits& counted : session.counted_waits)
    by_thread[counted.tid].push_back(&counted);
  for (const auto& [key, counted] : left_out) by_thread[counted.tid].push_back(&counted);
  const std::string under = " < " + FormatDuration(std::max(session.counted_waits_limit_ns,
                                                            session.trace_detail_under_ns));
  for (auto& [tid, thread_records] : by_thread) {
    auto& records = thread_records;  // a lambda may not capture a structured binding (Clang 14)
    std::stable_sort(records.begin(), records.end(),
                     [](const auto* a, const auto* b) { return a->end_ns < b->end_ns; });
    ThreadTracks& thread = tracks.Thread(tid, records.front()->pid);
    auto write = [&](CountedWaits::Kind kind, TrackKind track_kind, const std::string& name,
                     const char* unit, auto value_of) {
      EventTrack* track = nullptr;
      int64_t total = 0;
      for (const CountedWaits* counted : records) {
        if (counted->kind != kind) continue;
        if (track == nullptr) {
          track = &tracks.Counted(thread, track_kind, name, unit);
          packets.WriteCounter(track->sequence, counted->start_ns, 0);
        }
        total += static_cast<int64_t>(value_of(*counted));
        packets.WriteCounter(track->sequence, counted->end_ns, total);
      }
    };
    write(CountedWaits::Kind::kOffCpu, TrackKind::kShortOffCpu, "off-CPU" + under + " (count)",
          "waits", [](const CountedWaits& c) { return c.count; });
    write(CountedWaits::Kind::kOffCpu, TrackKind::kShortOffCpuTime, "off-CPU" + under + " (us)",
          "us", [](const CountedWaits& c) { return c.total_ns / 1000; });
    write(CountedWaits::Kind::kFutex, TrackKind::kShortFutex, "futex" + under + " (count)", "calls",
          [](const CountedWaits& c) { return c.count; });
  }
}

}  // namespace gprof::collector::perfetto
