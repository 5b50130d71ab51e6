#include "collector/writers/perfetto/diagnosis_tracks.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collector/analysis/wait_class.h"
#include "collector/writers/words/diagnosis_sentences.h"
#include "collector/writers/words/gpu_names.h"
#include "collector/writers/perfetto/flow_ids.h"

namespace gprof::collector::perfetto {
namespace {

// The diagnosis as slices: one per freeze and per GPU gap, named by what happened and carrying the
// explanation; laid out greedily on as many lanes as overlaps need.
class DiagnosisWriter {
 public:
  DiagnosisWriter(const Session& session, const Analysis& diagnosis, TrackRegistry& tracks,
                  PacketWriter& packets, StringInterner& interner, const Vocabulary& vocabulary)
      : session_(session),
        diagnosis_(diagnosis),
        tracks_(tracks),
        packets_(packets),
        interner_(interner),
        vocabulary_(vocabulary) {}

  void Write() {
    struct Item {
      uint64_t start_ns, end_ns;
      std::string name, explanation;
      int cause;
    };
    std::vector<Item> items;
    for (const Freeze& freeze : diagnosis_.freezes) {
      if (!freeze.of_stalls()) continue;
      std::string name = std::to_string(freeze.tids.size()) + " threads froze";
      std::string explanation;
      if (freeze.cause >= 0) {
        const Cause& cause = diagnosis_.causes[freeze.cause];
        name += " on " + CauseClassLabel(cause);
        explanation = "waited on " + CauseIdentity(session_, cause);
        if (cause.holder_tid != 0)
          explanation += "; held by " + session_.ThreadLabel(cause.holder_tid);
        if (cause.root)
          explanation += "; root: " + DescribeLink(session_, *cause.root, &diagnosis_.lock_users);
      }
      items.push_back({freeze.start_ns, freeze.end_ns, name, explanation, freeze.cause});
    }
    for (const GpuGap& gap : diagnosis_.gaps) {
      std::string name =
          GpuDeviceName(diagnosis_.devices[gap.device], diagnosis_.devices) + " idle";
      std::string explanation;
      if (gap.gpu_side) {
        explanation = "queued in time, held on the GPU side";
      } else if (gap.late_thread) {
        explanation =
            "waited for " + DescribeLink(session_, *gap.late_thread, &diagnosis_.lock_users);
      }
      items.push_back({gap.start_ns, gap.end_ns, name, explanation, gap.cause});
    }
    for (const Stall& stall : diagnosis_.stalls) {
      if (!InDeadlock(stall)) continue;
      items.push_back({stall.wait.start_ns, stall.wait.end_ns, "DEADLOCK",
                       DescribeDeadlock(session_, stall), stall.cause});
    }
    std::stable_sort(items.begin(), items.end(),
                     [](const Item& a, const Item& b) { return a.start_ns < b.start_ns; });
    std::vector<uint64_t> lane_ends;
    for (const Item& item : items) {
      size_t lane = 0;
      while (lane < lane_ends.size() && lane_ends[lane] > item.start_ns) ++lane;
      if (lane == lane_ends.size()) lane_ends.push_back(0);
      lane_ends[lane] = item.end_ns;
      Sequence& sequence = tracks_.Diagnosis(static_cast<uint32_t>(lane)).sequence;
      TrackEventSpec begin;
      begin.type = TrackEventType::kSliceBegin;
      begin.timestamp_ns = item.start_ns;
      begin.name_iid = interner_.Intern(InternTable::kEventNames, item.name);
      begin.category_iid = vocabulary_.gprof_run;
      if (!item.explanation.empty()) {
        begin.Annotate(vocabulary_.explanation, Annotation::Kind::kInternedString,
                       interner_.Intern(InternTable::kAnnotationStrings, item.explanation));
      }
      if (item.cause >= 0) {
        const Cause& cause = diagnosis_.causes[item.cause];
        begin.Annotate(vocabulary_.cause_rank, Annotation::Kind::kUint, cause.number);
        begin.Annotate(
            vocabulary_.cause, Annotation::Kind::kInternedString,
            interner_.Intern(InternTable::kAnnotationStrings,
                             CauseClassLabel(cause) + ": " + CauseIdentity(session_, cause)));
      }
      packets_.WriteTrackEvent(sequence, begin);
      packets_.WriteSliceEnd(sequence, std::max(item.end_ns, item.start_ns));
    }
    WriteFlows();
  }

 private:
  // For each wait of a freeze: a "waits for" instant on the waiting thread's "why" track where the
  // wait began, with a flow to a "holds" instant on the holder's where it let the waiter go (the
  // wake). For each wait of a lock cycle, the flow goes to the holder the lock named, where the
  // wait began: nobody let it go. Written per track in time order, after everything else.
  void WriteFlows() {
    struct End {
      uint32_t tid, pid;
      uint64_t time_ns;
      std::string name;
      uint64_t flow_out = 0, flow_in = 0;
    };
    std::vector<End> ends;
    uint64_t next_flow = FlowIds(session_).first_diagnosis;
    for (const Freeze& freeze : diagnosis_.freezes) {
      for (int index : freeze.stalls) {
        const Stall& stall = diagnosis_.stalls[index];
        if (stall.chain.empty() || stall.wait.wake_ns == 0 || stall.chain.front().owner) continue;
        const ChainLink& ender = stall.chain.front();
        const ChainLink& root = stall.chain.back();
        uint64_t flow = next_flow++;
        ends.push_back({stall.tid, stall.pid, stall.wait.start_ns,
                        "waits for " + session_.ThreadLabel(root.tid), flow, 0});
        ends.push_back({ender.tid, ender.pid, stall.wait.wake_ns,
                        "lets " + session_.ThreadLabel(stall.tid) + " go", 0, flow});
      }
    }
    for (const Stall& stall : diagnosis_.stalls) {
      if (!InDeadlock(stall)) continue;
      const ChainLink& holder = stall.chain.front();
      uint64_t flow = next_flow++;
      ends.push_back({stall.tid, stall.pid, stall.wait.start_ns,
                      "waits for " + session_.ThreadLabel(holder.tid) + " (deadlock)", flow, 0});
      ends.push_back({holder.tid, holder.pid, stall.wait.start_ns,
                      "holds what " + session_.ThreadLabel(stall.tid) + " waits for", 0, flow});
    }
    std::stable_sort(ends.begin(), ends.end(),
                     [](const End& a, const End& b) { return a.time_ns < b.time_ns; });
    for (const End& end : ends) {
      TrackEventSpec instant;
      instant.type = TrackEventType::kInstant;
      instant.timestamp_ns = end.time_ns;
      instant.name_iid = interner_.Intern(InternTable::kEventNames, end.name);
      instant.category_iid = vocabulary_.gprof_run;
      if (end.flow_out != 0) instant.flow_ids = std::span<const uint64_t>(&end.flow_out, 1);
      instant.terminating_flow_id = end.flow_in;
      EventTrack& track = tracks_.Why(tracks_.Thread(end.tid, end.pid));
      packets_.WriteTrackEvent(track.sequence, instant);
    }
  }

  const Session& session_;
  const Analysis& diagnosis_;
  TrackRegistry& tracks_;
  PacketWriter& packets_;
  StringInterner& interner_;
  const Vocabulary& vocabulary_;
};

}  // namespace

void WriteDiagnosisTracks(const Session& session, const Analysis& diagnosis, TrackRegistry& tracks,
                          PacketWriter& packets, StringInterner& interner,
                          const Vocabulary& vocabulary) {
  DiagnosisWriter(session, diagnosis, tracks, packets, interner, vocabulary).Write();
}

}  // namespace gprof::collector::perfetto
