#include "collector/writers/perfetto/signal_track.h"

#include <algorithm>
#include <vector>

#include "collector/writers/words/kernel_names.h"

namespace gprof::collector::perfetto {

void WriteSignals(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                  StringInterner& interner, const Vocabulary& vocabulary) {
  std::vector<const SignalSent*> sorted;
  sorted.reserve(session.signals.size());
  for (const SignalSent& signal : session.signals) sorted.push_back(&signal);
  std::stable_sort(sorted.begin(), sorted.end(), [](const SignalSent* a, const SignalSent* b) {
    return a->time_ns < b->time_ns;
  });
  for (const SignalSent* signal : sorted) {
    TrackEventSpec instant;
    instant.type = TrackEventType::kInstant;
    instant.timestamp_ns = signal->time_ns;
    instant.name_iid = interner.Intern(InternTable::kEventNames, SignalText(session, *signal));
    instant.category_iid = vocabulary.signal;
    instant.Annotate(
        vocabulary.to, Annotation::Kind::kInternedString,
        interner.Intern(InternTable::kAnnotationStrings, SignalAddressee(signal->flags)));
    if (const char* outcome = SignalOutcome(signal->result); *outcome != '\0') {
      instant.Annotate(vocabulary.outcome, Annotation::Kind::kInternedString,
                       interner.Intern(InternTable::kAnnotationStrings, outcome));
    }
    packets.WriteTrackEvent(tracks.Signals(tracks.Thread(signal->tid, signal->pid)).sequence,
                            instant);
  }
}

}  // namespace gprof::collector::perfetto
