#include "cli/session_closing.h"

#include <sys/resource.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include <cstdlib>
#include <cstring>

#include "inject/profiler_watch.h"
#include "inject/shared/clock.h"
#include "inject/shared/disk_room.h"
#include "inject/shared/namespaces.h"

namespace gprof::cli {
namespace {

// How long gprof-run waits, once the command has ended, for the writers of processes that run on
// to close their files (each sees the closed session within its flush interval, 200 ms).
constexpr int kCloseWaitMs = 2000;

// The processes of the tree whose writers hold a slot in the control file and are still running.
// Whether the process of a writer's slot runs. A slot without its start time yet (taken by a
// process's first call, before its writer ran) is its process's while the pid exists.
bool SlotRunning(uint32_t pid, uint64_t start_ticks) {
  if (start_ticks != 0) return inject::ProcessRunning(static_cast<int>(pid), start_ticks);
  return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::vector<OpenWriter> OpenWriters(const SessionControl& control) {
  std::vector<OpenWriter> open;
  static const uint32_t own_namespace = OwnPidNamespace();
  control.ForEachWriter([&](uint32_t pid, uint64_t start_ticks, uint32_t pid_namespace) {
    // A writer in another PID namespace (a container the command started) has a pid that names
    // another process here, or none: it counts as running until it gives its slot back.
    if (pid_namespace != own_namespace) {
      open.emplace_back(pid, 0);
      return;
    }
    if (SlotRunning(pid, start_ticks)) open.emplace_back(pid, start_ticks);
  });
  return open;
}

}  // namespace

std::vector<OpenWriter> CloseSession(SessionControl* control, bpf::KernelRecorder* kernel) {
  control->Close(MonotonicNs());
  auto open_at_close = OpenWriters(*control);
  uint64_t deadline = MonotonicNs() + uint64_t{kCloseWaitMs} * 1'000'000;
  while ((!OpenWriters(*control).empty() || control->unslotted_writers() > 0) &&
         MonotonicNs() < deadline) {
    if (kernel != nullptr) {
      kernel->Poll(20);
    } else {
      usleep(20'000);
    }
  }
  return open_at_close;
}

void RecordSessionControl(const SessionControl& control,
                          const std::vector<OpenWriter>& open_at_close,
                          int session_dir_fd, RunDescription* run) {
  uint64_t margin_mib = DiskRoomOf(session_dir_fd).margin_bytes >> 20;
  uint64_t dropped = control.ForEachNote([&](const SessionControlState::Note& note) {
    RunDescription::Stop stop;
    stop.file = std::string(note.file, strnlen(note.file, sizeof(note.file)));
    stop.time_ns = note.time_ns;
    stop.cause = format::StopCauseWord(static_cast<format::StopCause>(note.cause));
    switch (static_cast<format::StopCause>(note.cause)) {
      case format::StopCause::kDiskRoom:
        stop.reason = "no room above the disk margin (gprof-run leaves " +
                      std::to_string(margin_mib) + " MiB of the session's filesystem free)";
        break;
      case format::StopCause::kFileLost:
        stop.reason =
            "the program closed or replaced the descriptor of the file, and the file "
            "could not be opened again";
        break;
      case format::StopCause::kDirectoryLost:
        stop.reason = std::string(
                          "nothing recorded: the session directory was not at its path as "
                          "gprof-run made it (moved, removed or replaced by a link)") +
                      (note.error > 0 ? std::string(": ") + strerror(note.error) : "");
        break;
      case format::StopCause::kMemoryLimit:
        stop.reason = std::string("nothing recorded: the process ran under ") +
                      (note.error == RLIMIT_DATA ? "a data size limit (RLIMIT_DATA)"
                                                 : "an address-space limit (ulimit -v)") +
                      ", where the memory recording takes could make the program's own "
                      "allocations fail";
        break;
      case format::StopCause::kThreadLimit:
        stop.reason =
            note.error == 0
                ? std::string("nothing recorded: the process ran under a small process limit "
                              "(ulimit -u), where its writer thread could take a thread the "
                              "program needs")
                : std::string("nothing recorded: its writer thread could not be started (") +
                      strerror(note.error) + "; the process limit, ulimit -u, reached?)";
        break;
      case format::StopCause::kFileNotCreated:
        stop.reason = std::string("nothing recorded: its session file could not be created") +
                      (note.error > 0 ? std::string(" (") + strerror(note.error) + ")" : "");
        break;
      default:
        stop.reason = std::string("its stop record could not be written") +
                      (note.error > 0 ? std::string(": ") + strerror(note.error) : "");
    }
    stop.reason += " (pid " + std::to_string(note.pid) + ")";
    if (note.records_lost > 0) {
      stop.reason += "; " + std::to_string(note.records_lost) + " records lost";
    }
    run->other_stops.push_back(std::move(stop));
  });
  if (dropped > 0) {
    run->other_stops.push_back(
        {"inject-*.gpr", run->end_monotonic_ns, "write_failed",
         std::to_string(dropped) + " more processes stopped recording without room to say why"});
  }
  auto add = [&](uint32_t pid, bool still_writing) {
    for (auto& running : run->running_at_end) {
      if (running.pid == static_cast<int>(pid)) {
        running.still_writing |= still_writing;
        return;
      }
    }
    run->running_at_end.push_back({static_cast<int>(pid), still_writing});
  };
  for (const auto& [pid, start_ticks] : open_at_close) {
    if (SlotRunning(pid, start_ticks)) add(pid, false);
  }
  for (const auto& [pid, start_ticks] : OpenWriters(control)) add(pid, true);
  // A slot still taken by a process that is gone: it ended without its writer's last pass (a
  // SIGKILL ends a process at once), and the calls its rings and staging held went with it. The
  // slot's counts say how many.
  control.ForEachWriterCalls(
      [&](uint32_t pid, uint64_t start_ticks, uint64_t submitted, uint64_t accounted) {
        if (SlotRunning(pid, start_ticks)) return;
        if (submitted <= accounted) return;
        run->lost.push_back(
            {"CUDA calls of pid " + std::to_string(pid) +
                 " (it ended before its recorder wrote them: killed by SIGKILL, or its recorder "
                 "could not finish in time)",
             submitted - accounted});
      });
  control.ForEachNestedSession([&](const SessionControlState::NestedSession& nested) {
    run->nested_sessions.push_back(
        {static_cast<int>(nested.pid),
         std::string(nested.directory, strnlen(nested.directory, sizeof(nested.directory))),
         nested.calls == UINT64_MAX ? std::nullopt : std::optional<unsigned long long>(nested.calls)});
  });
  if (uint64_t unslotted = control.unslotted_writers(); unslotted > 0) {
    run->other_stops.push_back({"inject-*.gpr", run->end_monotonic_ns, "session_closed",
                                std::to_string(unslotted) +
                                    " more processes had their files open when the report was "
                                    "made: those files may change after it"});
  }
}

void EnclosingSession::AttachFromEnvironment() {
  const char* handle = getenv(kSessionControlEnv);
  if (handle != nullptr && *handle != '\0') control_.Attach(handle);  // none: not nested
}

void EnclosingSession::NoteNested(const std::string& directory, std::optional<uint64_t> calls) {
  control_.NoteNestedSession(static_cast<uint32_t>(getpid()), directory.c_str(),
                             calls.value_or(UINT64_MAX));
}

}  // namespace gprof::cli
