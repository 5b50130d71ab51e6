// The merged model of one session: what the injected library and the kernel recorder saw, on one
// clock (CLOCK_MONOTONIC, nanoseconds). Readers fill it, the analysis and the writers read it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace gprof::collector {

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t file_offset = 0;
  std::string perms;  // "rw-p"
  std::string path;   // empty for anonymous memory
};

struct Process {
  uint32_t pid = 0;
  uint32_t ppid = 0;
  std::string exe;
  std::vector<std::string> cmdline;
  std::vector<Mapping> maps;     // latest /proc/PID/maps snapshot, sorted by start
  uint64_t dropped_records = 0;  // CUDA call records the injected library could not keep
};

struct Thread {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string name;
  uint64_t exit_ns = 0;  // 0: not seen exiting
};

struct ApiCall {
  uint64_t enter_ns = 0;
  uint64_t exit_ns = 0;
  uint64_t stream = 0;
  uint64_t correlation_id = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t name_index = 0;  // into Session::api_names
  int32_t return_code = 0;
  uint32_t flags = 0;  // format::ApiCallFlags
  uint64_t duration() const { return exit_ns - enter_ns; }
};

// Thread state at switch-out, from the kernel's prev_state.
enum class OffCpuState : uint8_t { kRunnable, kSleeping, kDiskSleep, kOther };
// "runnable", "sleeping", "uninterruptible", "other".
const char* StateName(OffCpuState state);

struct OffCpuInterval {
  uint64_t start_ns = 0;  // switched out
  uint64_t end_ns = 0;    // switched in
  uint64_t wake_ns = 0;   // made runnable; 0 when preempted
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t waker_pid = 0;
  uint32_t waker_tid = 0;
  int32_t kstack_id = -1;
  int32_t waker_kstack_id = -1;
  uint32_t raw_state = 0;  // prev_state as the kernel gave it
  uint32_t cpu = 0;
  uint32_t flags = 0;  // gprof_offcpu_flags
  std::string waker_comm;
  OffCpuState state() const;
  uint64_t duration() const { return end_ns - start_ns; }
};

struct FutexCall {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t uaddr = 0;
  uint64_t uaddr2 = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t op = 0;  // with FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME
  uint32_t val = 0;
  uint32_t val3 = 0;
  int64_t timeout_ns = -1;  // -1: none; -2: set, but the recorder could not read it
  int64_t ret = 0;
  uint32_t flags = 0;  // gprof_futex_flags: GPROF_FUTEX_UNFINISHED when still waiting at the end
  uint32_t command() const { return op & 0x7f; }  // FUTEX_CMD_MASK
  bool is_wait() const;
  bool is_wake() const;
  uint64_t duration() const { return end_ns - start_ns; }
};

struct TaskStart {
  uint64_t time_ns = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint32_t parent_pid = 0;
  uint32_t parent_tid = 0;
  int32_t parent_kstack_id = -1;
  bool is_thread = false;
};

// Something a reader had to say about the input: a damaged chunk, a truncated file.
struct Diagnostic {
  std::string file;
  uint64_t offset = 0;
  std::string message;
};

struct LostEvents {
  std::string what;  // "kernel ring buffer: off-CPU", "CUDA calls (pid 123)"
  uint64_t count = 0;
};

// What gprof-run wrote in session.json about the run itself.
struct SessionMeta {
  std::string tool_version;
  std::vector<std::string> command;
  uint32_t root_pid = 0;
  uint64_t start_monotonic_ns = 0;
  uint64_t end_monotonic_ns = 0;
  uint64_t start_realtime_ns = 0;
  uint64_t start_boottime_ns = 0;
  std::optional<int> exit_code;    // CMD exited normally with this status
  std::optional<int> exit_signal;  // CMD died of this signal
  bool kernel_recording = false;
  std::string kernel_recording_note;  // why it is off, when it is
};

struct Session {
  std::string directory;
  SessionMeta meta;
  std::map<uint32_t, Process> processes;  // by pid
  std::map<uint32_t, Thread> threads;     // by tid
  std::vector<std::string> api_names;
  std::vector<ApiCall> api_calls;                                    // sorted by enter_ns
  std::vector<OffCpuInterval> off_cpu;                               // sorted by start_ns
  std::vector<FutexCall> futex_calls;                                // sorted by start_ns
  std::vector<TaskStart> task_starts;                                // sorted by time_ns
  std::unordered_map<int32_t, std::vector<uint64_t>> kernel_stacks;  // innermost frame first
  std::unordered_map<uint64_t, std::string> kernel_symbols;          // address -> "function+0x1a"
  std::vector<LostEvents> lost;
  std::vector<Diagnostic> diagnostics;
  std::vector<std::string> messages;  // from the injected library: "pid 12: ..."

  const std::string& ApiName(const ApiCall& call) const { return api_names[call.name_index]; }
  // "name (tid)" or "tid" when the thread has no known name.
  std::string ThreadLabel(uint32_t tid) const;
  // Kernel stack as symbols, innermost first; "0x..." where no symbol is known.
  std::vector<std::string> KernelStack(int32_t stack_id) const;
  // The mapping that holds `address` in process `pid`, if its maps were recorded.
  const Mapping* FindMapping(uint32_t pid, uint64_t address) const;
};

}  // namespace gprof::collector
