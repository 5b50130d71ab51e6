#include "collector/writers/perfetto/gprof_run_track.h"

#include <string>

#include "collector/model/value_format.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"

namespace gprof::collector::perfetto {
namespace {

// Instants on the "gprof-run" track at the session's start: everything the trace is missing.
class GprofRunEventWriter {
 public:
  GprofRunEventWriter(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                      StringInterner& interner, const Vocabulary& vocabulary)
      : session_(session),
        tracks_(tracks),
        packets_(packets),
        interner_(interner),
        vocabulary_(vocabulary) {}

  void Write() {
    for (const LostEvents& lost : session_.lost) WriteCount("lost: " + lost.what, lost.count);
    for (const Diagnostic& diagnostic : session_.diagnostics) WriteDiagnostic(diagnostic);
    for (const std::string& message : session_.messages) WriteEvent(Instant("message: " + message));
    if (!session_.meta.kernel_recording) WriteEvent(Instant(KernelRecordingOffText()));
    // What --delay/--duration kept, and where --max-size cut: from then on the trace is empty.
    if (std::string window = WindowText(session_); !window.empty())
      WriteEvent(Instant("window: " + window));
    if (std::string cap = MaxSizeText(session_); !cap.empty()) {
      TrackEventSpec event = Instant("max-size: " + cap);
      if (session_.meta.max_size->stopped_at_monotonic_ns != 0)
        event.timestamp_ns = session_.meta.max_size->stopped_at_monotonic_ns;
      WriteEvent(event);
    }
    WriteCaptureWindows();
  }

 private:
  // --capture-range: each window a slice, named by what it holds; what is between is unrecorded.
  void WriteCaptureWindows() {
    if (!session_.meta.capture) return;
    if (std::string flight = FlightText(session_); !flight.empty()) {
      // Its one window is the span it held: one slice, and the trigger as an instant.
      WriteEvent(Instant("flight recorder: " + flight));
      auto [start, end] = FlightSpan(session_);
      if (end == 0) return;
      TrackEventSpec begin = Instant("recorded: the flight recorder's last seconds");
      begin.type = TrackEventType::kSliceBegin;
      begin.timestamp_ns = start;
      begin.Annotate(vocabulary_.explanation, Annotation::Kind::kInternedString,
                     interner_.Intern(InternTable::kAnnotationStrings, flight));
      WriteEvent(begin);
      packets_.WriteSliceEnd(tracks_.GprofRun().sequence, end);
      return;
    }
    WriteEvent(Instant("capture: " + CaptureText(session_)));
    const auto& windows = session_.meta.capture->windows;
    for (size_t i = 0; i < windows.size(); ++i) {
      uint64_t end = windows[i].end_monotonic_ns != 0 ? windows[i].end_monotonic_ns
                                                      : session_.meta.end_monotonic_ns;
      if (end < windows[i].start_monotonic_ns) end = windows[i].start_monotonic_ns;
      TrackEventSpec begin = Instant("recorded: window " + std::to_string(i + 1));
      begin.type = TrackEventType::kSliceBegin;
      begin.timestamp_ns = windows[i].start_monotonic_ns;
      begin.Annotate(
          vocabulary_.explanation, Annotation::Kind::kInternedString,
          interner_.Intern(InternTable::kAnnotationStrings, CaptureWindowText(session_, i)));
      WriteEvent(begin);
      packets_.WriteSliceEnd(tracks_.GprofRun().sequence, end);
    }
  }

  TrackEventSpec Instant(const std::string& name) {
    TrackEventSpec event;
    event.timestamp_ns = SessionOrigin(session_);
    event.name_iid = interner_.Intern(InternTable::kEventNames, name);
    event.category_iid = vocabulary_.gprof_run;
    return event;
  }

  void WriteCount(const std::string& name, uint64_t count) {
    TrackEventSpec event = Instant(name);
    event.Annotate(vocabulary_.count, Annotation::Kind::kUint, count);
    WriteEvent(event);
  }

  void WriteDiagnostic(const Diagnostic& diagnostic) {
    TrackEventSpec event = Instant("reader: " + diagnostic.message);
    event.Annotate(vocabulary_.file, Annotation::Kind::kInternedString,
                   interner_.Intern(InternTable::kAnnotationStrings, diagnostic.file));
    event.Annotate(vocabulary_.offset, Annotation::Kind::kUint, diagnostic.offset);
    WriteEvent(event);
  }

  std::string KernelRecordingOffText() const {
    const std::string& why = session_.meta.kernel_recording_note;
    return why.empty() ? "kernel recording off" : "kernel recording off: " + why;
  }

  void WriteEvent(const TrackEventSpec& event) {
    packets_.WriteTrackEvent(tracks_.GprofRun().sequence, event);
  }

  const Session& session_;
  TrackRegistry& tracks_;
  PacketWriter& packets_;
  StringInterner& interner_;
  const Vocabulary& vocabulary_;
};

}  // namespace

void WriteGprofRunEvents(const Session& session, TrackRegistry& tracks, PacketWriter& packets,
                         StringInterner& interner, const Vocabulary& vocabulary) {
  GprofRunEventWriter(session, tracks, packets, interner, vocabulary).Write();
}

}  // namespace gprof::collector::perfetto
