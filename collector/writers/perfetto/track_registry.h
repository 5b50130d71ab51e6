// The trace's tree of tracks: processes, their threads and each thread's child tracks, GPU streams
// and synchronization, counters, the diagnosis's lanes and the "gprof-run" track. Every writer of
// events asks it for the track of its event.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collector/model/model.h"
#include "collector/writers/perfetto/packet_sequence.h"
#include "collector/writers/perfetto/packet_writer.h"
#include "collector/writers/perfetto/perfetto_fields.h"

namespace gprof::collector::perfetto {

// Track uuids are derived from the pid/tid they belong to (a GPU stream: its ordinal in the
// trace), so they are stable and never collide within a session (sessions merged into one trace
// are kept apart by TrackScope's salt). Four bits: 15 is the last kind there is room for.

enum class TrackKind : uint64_t {
  kProcess = 1,
  kThread = 2,
  kOffCpu = 3,
  kFutex = 4,
  kGprofRun = 5,
  kGpuStream = 6,
  kGpuSync = 7,
  kKernel = 8,
  kDiagnosis = 9,
  kWhy = 10,
  kSignals = 11,
  kShortOffCpu = 12,      // counter: short off-CPU intervals so far
  kShortOffCpuTime = 13,  // counter: their time so far
  kShortFutex = 14,       // counter: short futex calls so far
};

inline uint64_t TrackUuid(TrackKind kind, uint32_t id) {
  return (uint64_t{id} << 4) | static_cast<uint64_t>(kind);
}

// Where one session's tracks go in a trace of several (merged_trace.h); a trace of one session
// has neither.
struct TrackScope {
  // In the bits above every TrackUuid (its id's 32 and its kind's 4), so that sessions whose pids
  // collide (two hosts) have tracks of their own.
  uint64_t uuid_salt = 0;
  std::string label;  // "rank 1": its processes' and global tracks' names begin "rank 1: "
};
inline constexpr int kTrackUuidSaltShift = 40;

// A track that carries events. Each has its own sequence, whose defaults name the track, so its
// events do not repeat the track uuid.
struct EventTrack {
  explicit EventTrack(uint32_t sequence_id) : sequence(sequence_id) {}
  Sequence sequence;
  std::vector<uint64_t> open_slice_ends;  // innermost last
};

struct ThreadTracks {
  ThreadTracks(uint32_t tid_, uint32_t sequence_id) : tid(tid_), thread(sequence_id) {}
  uint32_t tid;
  bool in_model = false;  // a thread of Session::threads
  EventTrack thread;
  std::optional<EventTrack> off_cpu;  // made on the thread's first off-CPU interval
  std::optional<EventTrack> futex;    // made on its first futex call
  std::optional<EventTrack> kernel;   // made on its first lock wait, fault, device or memory call
  std::optional<EventTrack> why;      // the diagnosis's flow ends: waits for, and holds for others
  std::optional<EventTrack> signals;  // made on the first signal generated for it
  // Counters of its short waits (CountedWaits), by TrackKind - kShortOffCpu.
  std::array<std::optional<EventTrack>, 3> counted;
};

inline std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

inline std::string_view ProcessName(const Process& process) {
  if (!process.exe.empty()) return BaseName(process.exe);
  if (!process.cmdline.empty()) return BaseName(process.cmdline.front());
  return {};
}

// Every track of the trace, each described when it is made. Child tracks are made when their first
// event comes, so threads without off-CPU or futex records show none.
class TrackRegistry {
 public:
  TrackRegistry(const Session& session, PacketWriter& packets, Sequence& metadata,
                const TrackScope& scope = {})
      : session_(session), packets_(packets), metadata_(metadata), scope_(scope) {}

  // The processes and threads of the model, each thread with its track.
  void DescribeModel() {
    for (const auto& [pid, process] : session_.processes) DescribeProcess(pid);
    // Python's name for a thread where the kernel's is the interpreter's, the kernel's beside it.
    for (const auto& [tid, thread] : session_.threads) {
      std::string native = session_.NativeNameBeside(tid);
      std::string name = session_.ThreadName(tid) + (native.empty() ? "" : " (" + native + ")");
      AddThread(thread.pid, tid, name).in_model = true;
    }
  }

  // A thread's tracks; a tid the model's thread list lacks gets tracks on first use, so no event is
  // lost for want of one.
  ThreadTracks& Thread(uint32_t tid, uint32_t pid) {
    if (ThreadTracks* found = Find(tid)) [[likely]]
      return *found;
    return AddThread(pid, tid, "");
  }

  // Whether `tid` is a thread of the model (Session::threads).
  bool InModel(uint32_t tid) {
    const ThreadTracks* found = Find(tid);
    return found != nullptr && found->in_model;
  }

  EventTrack& OffCpu(ThreadTracks& thread) {
    return ChildTrack(thread.off_cpu, thread, TrackKind::kOffCpu, "off-CPU");
  }

  EventTrack& Futex(ThreadTracks& thread) {
    return ChildTrack(thread.futex, thread, TrackKind::kFutex, "futex");
  }

  // The thread's system calls on GPU devices and memory maps, slow page faults and kernel lock
  // waits, nested as they happened (a lock wait in a page fault in an ioctl).
  EventTrack& Kernel(ThreadTracks& thread) {
    return ChildTrack(thread.kernel, thread, TrackKind::kKernel, "kernel");
  }

  EventTrack& Why(ThreadTracks& thread) {
    return ChildTrack(thread.why, thread, TrackKind::kWhy, "why");
  }

  EventTrack& Signals(ThreadTracks& thread) {
    return ChildTrack(thread.signals, thread, TrackKind::kSignals, "signals");
  }

  // A counter of the thread's short waits: `kind` kShortOffCpu, kShortOffCpuTime or kShortFutex.
  EventTrack& Counted(ThreadTracks& thread, TrackKind kind, const std::string& name,
                      const char* unit) {
    std::optional<EventTrack>& track =
        thread.counted[static_cast<size_t>(kind) - static_cast<size_t>(TrackKind::kShortOffCpu)];
    if (!track) {
      track.emplace(NextSequenceId());
      packets_.WriteEventTrackDescriptor(
          track->sequence, Uuid(kind, thread.tid), [&](DescriptorBuilder& descriptor) {
            descriptor.AddUint64(TrackDescriptorField::kParentUuid,
                                 Uuid(TrackKind::kThread, thread.tid));
            descriptor.AddString(TrackDescriptorField::kName, name);
            ProtoMessage<CounterDescriptorField> counter{descriptor,
                                                         TrackDescriptorField::kCounter};
            counter.AddString(CounterDescriptorField::kUnitName, unit);
          });
    }
    return *track;
  }

  // The lane of one stream of one GPU of a process: "GPU 0 stream 13".
  EventTrack& GpuStream(uint32_t pid, uint32_t device, uint32_t stream) {
    auto key = std::make_tuple(pid, device, stream);
    auto found = gpu_streams_.find(key);
    if (found != gpu_streams_.end()) return found->second;
    EventTrack& track = gpu_streams_.try_emplace(key, NextSequenceId()).first->second;
    std::string name = "GPU " + std::to_string(device) + " stream " + std::to_string(stream);
    DescribeProcessChild(track, Uuid(TrackKind::kGpuStream, gpu_streams_.size()), pid, name);
    return track;
  }

  // A process's host-side waits for its GPU.
  EventTrack& GpuSync(uint32_t pid) {
    auto found = gpu_syncs_.find(pid);
    if (found != gpu_syncs_.end()) return found->second;
    EventTrack& track = gpu_syncs_.try_emplace(pid, NextSequenceId()).first->second;
    DescribeProcessChild(track, Uuid(TrackKind::kGpuSync, pid), pid, "GPU synchronization");
    return track;
  }

  // Lane `lane` of the diagnosis: freezes and GPU gaps overlap, and a track's slices must nest.
  EventTrack& Diagnosis(uint32_t lane) {
    auto [entry, inserted] = diagnosis_lanes_.try_emplace(lane, NextSequenceId());
    if (inserted) {
      uint64_t uuid = Uuid(TrackKind::kDiagnosis, lane);
      std::string name = Labeled(lane == 0 ? "diagnosis" : "diagnosis " + std::to_string(lane + 1));
      packets_.WriteEventTrackDescriptor(entry->second.sequence, uuid,
                                         [&](DescriptorBuilder& descriptor) {
                                           descriptor.AddString(TrackDescriptorField::kName, name);
                                         });
    }
    return entry->second;
  }

  // The first sequence id no track of this registry has.
  uint32_t next_sequence_id() const { return next_sequence_id_; }

  // The global track of what gprof-run has to say about the recording itself.
  EventTrack& GprofRun() {
    if (!gprof_run_) {
      uint64_t uuid = Uuid(TrackKind::kGprofRun, 0);
      gprof_run_.emplace(NextSequenceId());
      packets_.WriteEventTrackDescriptor(
          gprof_run_->sequence, uuid, [&](DescriptorBuilder& descriptor) {
            descriptor.AddString(TrackDescriptorField::kName, Labeled("gprof-run"));
          });
    }
    return *gprof_run_;
  }

 private:
  // The tracks of `tid`, or null: through a small table of threads asked for before, as each
  // event asks for its thread's tracks, and a session's events name a few threads over and over.
  ThreadTracks* Find(uint32_t tid) {
    RecentThread& recent = recent_threads_[tid % kRecentThreads];
    if (recent.tracks != nullptr && recent.tid == tid) [[likely]]
      return recent.tracks;
    auto found = threads_.find(tid);
    if (found == threads_.end()) return nullptr;
    recent = {tid, &found->second};
    return &found->second;
  }

  uint32_t NextSequenceId() { return next_sequence_id_++; }

  uint64_t Uuid(TrackKind kind, uint32_t id) const {
    return TrackUuid(kind, id) | scope_.uuid_salt;
  }

  // A process's or global track's name, with the session's label where it has one.
  std::string Labeled(std::string_view name) const {
    if (scope_.label.empty()) return std::string(name);
    return name.empty() ? scope_.label : scope_.label + ": " + std::string(name);
  }

  void DescribeProcess(uint32_t pid) {
    if (!described_pids_.insert(pid).second) return;
    auto process = session_.processes.find(pid);
    packets_.WriteTrackDescriptor(
        metadata_, Uuid(TrackKind::kProcess, pid), [&](DescriptorBuilder& descriptor) {
          ProtoMessage<ProcessDescriptorField> encoded{descriptor, TrackDescriptorField::kProcess};
          encoded.AddInt32(ProcessDescriptorField::kPid, static_cast<int32_t>(pid));
          if (process == session_.processes.end()) {
            if (!scope_.label.empty())
              encoded.AddString(ProcessDescriptorField::kProcessName, scope_.label);
            return;
          }
          for (const std::string& argument : process->second.cmdline) {
            encoded.AddString(ProcessDescriptorField::kCmdline, argument);
          }
          // Its Python role where one is known ("DataLoader worker 1"), else its executable.
          std::string role = session_.ProcessRole(pid);
          std::string name = Labeled(role.empty() ? ProcessName(process->second) : role);
          if (!name.empty()) encoded.AddString(ProcessDescriptorField::kProcessName, name);
        });
  }

  ThreadTracks& AddThread(uint32_t pid, uint32_t tid, const std::string& name) {
    DescribeProcess(pid);
    auto [entry, unused] = threads_.try_emplace(tid, tid, NextSequenceId());
    ThreadTracks& thread = entry->second;
    uint64_t uuid = Uuid(TrackKind::kThread, tid);
    packets_.WriteEventTrackDescriptor(
        thread.thread.sequence, uuid, [&](DescriptorBuilder& descriptor) {
          descriptor.AddUint64(TrackDescriptorField::kParentUuid, Uuid(TrackKind::kProcess, pid));
          ProtoMessage<ThreadDescriptorField> encoded{descriptor, TrackDescriptorField::kThread};
          encoded.AddInt32(ThreadDescriptorField::kPid, static_cast<int32_t>(pid));
          encoded.AddInt64(ThreadDescriptorField::kTid, tid);
          if (!name.empty()) encoded.AddString(ThreadDescriptorField::kThreadName, name);
        });
    return thread;
  }

  void DescribeProcessChild(EventTrack& track, uint64_t uuid, uint32_t pid,
                            const std::string& name) {
    DescribeProcess(pid);
    packets_.WriteEventTrackDescriptor(track.sequence, uuid, [&](DescriptorBuilder& descriptor) {
      descriptor.AddUint64(TrackDescriptorField::kParentUuid, Uuid(TrackKind::kProcess, pid));
      descriptor.AddString(TrackDescriptorField::kName, name);
    });
  }

  EventTrack& ChildTrack(std::optional<EventTrack>& track, const ThreadTracks& thread,
                         TrackKind kind, const char* name) {
    if (!track) {
      track.emplace(NextSequenceId());
      uint64_t uuid = Uuid(kind, thread.tid);
      packets_.WriteEventTrackDescriptor(track->sequence, uuid, [&](DescriptorBuilder& descriptor) {
        descriptor.AddUint64(TrackDescriptorField::kParentUuid,
                             Uuid(TrackKind::kThread, thread.tid));
        descriptor.AddString(TrackDescriptorField::kName, name);
      });
    }
    return *track;
  }

  const Session& session_;
  PacketWriter& packets_;
  Sequence& metadata_;  // the sequence of packets that need no track: clock snapshot, processes
  const TrackScope scope_;
  uint32_t next_sequence_id_ = metadata_.id() + 1;
  std::optional<EventTrack> gprof_run_;
  std::map<uint32_t, EventTrack> diagnosis_lanes_;
  std::unordered_map<uint32_t, ThreadTracks> threads_;  // by tid; elements never move
  struct RecentThread {
    uint32_t tid = 0;
    ThreadTracks* tracks = nullptr;
  };
  static constexpr size_t kRecentThreads = 256;
  std::array<RecentThread, kRecentThreads> recent_threads_{};  // by tid % kRecentThreads
  std::unordered_set<uint32_t> described_pids_;
  // By pid, device and stream; elements never move.
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, EventTrack> gpu_streams_;
  std::unordered_map<uint32_t, EventTrack> gpu_syncs_;  // by pid
};

}  // namespace gprof::collector::perfetto
