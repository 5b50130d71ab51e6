#include "collector/session/unrecorded_processes.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collector/model/value_format.h"

namespace gprof::collector {
namespace {

// The kernel recorder's file names are cut to this (inject/format/kernel_events.h,
// GPROF_FILE_NAME_LEN - 1).
constexpr size_t kRecordedNameBytes = 31;
constexpr std::string_view kInjectStem = "libgprof_inject";

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Names gprof-run's injected library goes by: its own, and that of the --inject-lib that
// session.json names (a name the kernel cut short matches its start).
class InjectLibrary {
 public:
  explicit InjectLibrary(const SessionMeta& meta)
      : path_(meta.inject_library), name_(BaseName(meta.inject_library)) {}

  bool Is(std::string_view name) const {
    if (name.starts_with(kInjectStem)) return true;
    if (name_.empty()) return false;
    return name == name_ || (name.size() == kRecordedNameBytes && name_.starts_with(name));
  }
  bool IsPath(std::string_view path) const {
    return (!path_.empty() && path == path_) || Is(BaseName(path));
  }
  std::string Name() const { return name_.empty() ? std::string(kInjectStem) + ".so" : name_; }

 private:
  std::string path_;
  std::string name_;
};

// What the record shows of one process image, from its start (an exec, a fork) on.
struct Image {
  bool known = false;  // its start was recorded, or a maps snapshot shows it whole
  uint64_t start_ns = 0;
  std::string cuda;  // the first CUDA library it loaded; empty: none seen
  uint64_t cuda_ns = 0;
  const char* evidence = "";
  bool injected = false;
  uint32_t forked_from = 0;
  bool inherited = false;  // `cuda` came with the fork
};

enum class Kind : uint8_t { kFork, kExec, kLoad, kSnapshot };

struct Event {
  uint64_t time_ns = 0;
  Kind kind = Kind::kLoad;
  uint32_t pid = 0;
  uint32_t parent = 0;    // kFork
  std::string_view cuda;  // kLoad, kSnapshot: a CUDA library loaded or mapped
  bool inject = false;    // kLoad, kSnapshot: the injected library
};

struct Candidate {
  uint32_t pid = 0;
  Image image;
  uint64_t end_ns = 0;
};

Event At(uint64_t time_ns, Kind kind, uint32_t pid) {
  Event event;
  event.time_ns = time_ns;
  event.kind = kind;
  event.pid = pid;
  return event;
}

std::vector<Event> Timeline(const Session& session, const InjectLibrary& inject) {
  std::vector<Event> events;
  for (const TaskStart& start : session.task_starts) {
    if (start.is_thread) continue;
    events.push_back(At(start.time_ns, Kind::kFork, start.pid));
    events.back().parent = start.parent_pid;
  }
  for (const auto& [pid, process] : session.processes) {
    for (uint64_t exec_ns : process.exec_ns) events.push_back(At(exec_ns, Kind::kExec, pid));
    for (const LoadedFile& file : process.loaded_files) {
      Event event = At(file.time_ns, Kind::kLoad, pid);
      event.inject = inject.Is(file.name);
      if (!event.inject && IsCudaLibrary(file.name)) event.cuda = file.name;
      if (event.inject || !event.cuda.empty()) events.push_back(event);
    }
    for (const MapsSnapshot& snapshot : process.maps) {
      Event event = At(snapshot.time_ns, Kind::kSnapshot, pid);
      for (const Mapping& mapping : snapshot.mappings) {
        if (mapping.perms.find('x') == std::string::npos) continue;
        if (inject.IsPath(mapping.path)) {
          event.inject = true;
        } else if (event.cuda.empty() && IsCudaLibrary(BaseName(mapping.path))) {
          event.cuda = BaseName(mapping.path);
        }
      }
      events.push_back(event);
    }
  }
  // At one time: a fork or an exec starts the image that what comes with it belongs to.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.time_ns, a.kind) < std::tie(b.time_ns, b.kind);
  });
  return events;
}

std::vector<Candidate> ImagesWithoutInjection(const std::vector<Event>& events) {
  std::unordered_map<uint32_t, Image> images;
  std::vector<Candidate> found;
  auto close = [&](uint32_t pid, uint64_t end_ns) {
    auto it = images.find(pid);
    if (it == images.end()) return;
    const Image& image = it->second;
    if (image.known && !image.cuda.empty() && !image.injected)
      found.push_back({pid, image, end_ns});
    images.erase(it);
  };
  for (const Event& event : events) {
    switch (event.kind) {
      case Kind::kFork: {
        close(event.pid, event.time_ns);  // a pid used again
        Image image;
        if (auto parent = images.find(event.parent); parent != images.end()) {
          image = parent->second;  // the same memory, libraries included
          image.inherited = !image.cuda.empty();
        }
        image.start_ns = event.time_ns;
        image.forked_from = event.parent;
        images[event.pid] = image;
        break;
      }
      case Kind::kExec:
        close(event.pid, event.time_ns);
        images[event.pid] = Image();
        images[event.pid].known = true;
        images[event.pid].start_ns = event.time_ns;
        break;
      case Kind::kLoad:
      case Kind::kSnapshot: {
        Image& image = images[event.pid];
        image.injected |= event.inject;
        if (!event.cuda.empty() && image.cuda.empty()) {
          image.cuda = PrintableName(event.cuda);  // a mapping's path is kept as the file has it
          image.cuda_ns = event.time_ns;
          image.evidence = event.kind == Kind::kLoad ? "memory_map" : "maps_snapshot";
          image.inherited = false;
        }
        // A snapshot shows all that is mapped: whether the injection is there needs no start.
        if (event.kind == Kind::kSnapshot && !image.cuda.empty()) image.known = true;
        break;
      }
    }
  }
  std::vector<uint32_t> open;
  for (const auto& [pid, image] : images) open.push_back(pid);
  for (uint32_t pid : open) close(pid, UINT64_MAX);
  return found;
}

// Drops the candidates that made a recorded CUDA call while their image ran: injected after all,
// whatever the record missed of its loading.
void DropThoseWithCalls(const Session& session, std::vector<Candidate>* candidates) {
  std::unordered_map<uint32_t, std::vector<uint64_t>> calls;  // of the candidates' pids only
  for (const Candidate& candidate : *candidates) calls[candidate.pid];
  for (const ApiCall& call : session.api_calls) {
    if (auto it = calls.find(call.pid); it != calls.end()) it->second.push_back(call.enter_ns);
  }
  std::erase_if(*candidates, [&](const Candidate& candidate) {
    const std::vector<uint64_t>& times = calls[candidate.pid];  // sorted, as api_calls are
    auto first = std::lower_bound(times.begin(), times.end(), candidate.image.start_ns);
    return first != times.end() && *first < candidate.end_ns;
  });
}

std::string Reason(const Session& session, const Candidate& candidate, const InjectLibrary& inject) {
  const Image& image = candidate.image;
  std::string text;
  if (image.inherited) {
    text = "was forked from pid " + std::to_string(image.forked_from) + " with " + image.cuda +
           " loaded and not gprof-run's " + inject.Name() +
           ": any CUDA calls it made were not recorded, as its parent's were not";
  } else {
    text = std::string(image.evidence == std::string_view("memory_map") ? "loaded " : "had ") +
           image.cuda + (image.evidence == std::string_view("memory_map") ? "" : " mapped") +
           " at " + FormatOffset(session, image.cuda_ns) + " but not gprof-run's " +
           inject.Name() +
           ": any CUDA calls it made were not recorded (LD_PRELOAD did not take effect in it: "
           "started with a cleared environment, as by `env -i`, or set-user-ID?)";
  }
  if (image.evidence == std::string_view("memory_map") && session.memory_map_calls_lost > 0) {
    text += "; the kernel record lost " + WithThousands(session.memory_map_calls_lost) +
            " memory map calls, which may have held its loading of " + inject.Name();
  }
  return text;
}

// The processes that ran a secure execution (set-user-ID, set-group-ID, file capabilities): the
// injected library records nothing in them, whatever they loaded (inject/process_limits.h).
void AddSecureExecutions(Session* session) {
  for (const auto& [pid, process] : session->processes) {
    if (process.secure_ns == 0) continue;
    UnrecordedProcess unrecorded;
    unrecorded.pid = pid;
    if (auto thread = session->threads.find(pid); thread != session->threads.end())
      unrecorded.name = thread->second.name;
    unrecorded.seen_ns = process.secure_ns;
    unrecorded.forked_from = process.secure_forked_from;
    unrecorded.evidence = "secure_exec";
    unrecorded.reason =
        (process.secure_forked_from != 0
             ? "was forked at " + FormatOffset(*session, process.secure_ns) + " from pid " +
                   std::to_string(process.secure_forked_from) + ", a secure execution"
             : "ran a set-user-ID, set-group-ID or file-capability program (secure execution) "
               "at " +
                   FormatOffset(*session, process.secure_ns)) +
        ": gprof-run records nothing of a privileged program's CUDA calls" +
        (process.secure_hidden
             ? ", and the kernel's record keeps only its start, signals and exit (the session is "
               "not root's)"
             : "");
    session->unrecorded_processes.push_back(std::move(unrecorded));
  }
}

}  // namespace

bool IsCudaLibrary(std::string_view name) {
  if (name.find(".so") == std::string_view::npos) return false;
  for (std::string_view stem : {std::string_view("libcudart"), std::string_view("libcuda")}) {
    if (name.size() > stem.size() && name.starts_with(stem) &&
        (name[stem.size()] == '.' || name[stem.size()] == '-'))
      return true;
  }
  return false;
}

void FindUnrecordedProcesses(Session* session) {
  session->unrecorded_processes.clear();
  AddSecureExecutions(session);
  std::set<uint32_t> listed;  // a pid once: a secure execution, or its first image without
  for (const UnrecordedProcess& process : session->unrecorded_processes) listed.insert(process.pid);
  auto by_pid = [&] {
    std::stable_sort(session->unrecorded_processes.begin(), session->unrecorded_processes.end(),
                     [](const UnrecordedProcess& a, const UnrecordedProcess& b) {
                       return a.pid < b.pid;
                     });
  };
  if (session->meta.cuda_mode == "off") return by_pid();
  InjectLibrary inject(session->meta);
  std::vector<Candidate> candidates = ImagesWithoutInjection(Timeline(*session, inject));
  DropThoseWithCalls(*session, &candidates);
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.pid, a.image.start_ns) < std::tie(b.pid, b.image.start_ns);
  });
  for (const Candidate& candidate : candidates) {
    if (!listed.insert(candidate.pid).second) continue;
    UnrecordedProcess process;
    process.pid = candidate.pid;
    if (auto thread = session->threads.find(candidate.pid); thread != session->threads.end())
      process.name = thread->second.name;
    process.cuda_library = candidate.image.cuda;
    process.seen_ns = candidate.image.cuda_ns;
    process.forked_from = candidate.image.inherited ? candidate.image.forked_from : 0;
    process.evidence = candidate.image.evidence;
    process.reason = Reason(*session, candidate, inject);
    session->unrecorded_processes.push_back(std::move(process));
  }
  by_pid();
}

}  // namespace gprof::collector
