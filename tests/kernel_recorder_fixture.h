// What the kernel recorder's tests (tests/kernel_recorder*_test.cc) share: the recorder started
// in a fresh session directory (KernelRecorderTest), a child process recorded while it runs a
// scenario (RunRecordedChild), kernel.gpr read back record by record (ReadRaw), and functions
// whose code lies in sections of their own, to find in the user stacks the kernel walks.
//
// Needs root (or CAP_BPF+CAP_PERFMON). Without it the tests skip, unless GPROF_REQUIRE_BPF=1 (CI),
// where they fail: CI must really run BPF.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bpf/kernel_recorder.h"
#include "inject/format/kernel_events.h"
#include "tests/test_support.h"

namespace gprof::bpf::recorder_test {

constexpr uint64_t kMs = 1000000;

// A new directory under /tmp, empty when none could be made.
std::string MakeSessionDir();
uint64_t NowNs();
void SleepNs(uint64_t ns);
// The scheduler state letter of a thread of this process ('R', 'S', 'D', ...), or 0.
char ThreadState(pid_t tid);
// Waits until thread `tid` of this process is in one of `states` ('S', 'D', 'Z'...), for up to
// 10 s.
bool WaitUntilState(pid_t tid, const char* states);
// A process outside the tree (a sibling of the child) that sleeps and wakes all along.
pid_t StartNoiseProcess();
// Reads exactly `size` bytes from `fd` within `timeout_ms`; false on timeout, EOF or error.
bool ReadFully(int fd, void* buffer, size_t size, int timeout_ms);

// ---- kernel.gpr, record by record ------------------------------------------------------------

// A user stack of kernel.gpr: its flags and return addresses, innermost first.
struct UserStack {
  uint32_t flags = 0;
  std::vector<uint64_t> ips;
};

struct MapsSnapshot {
  uint32_t pid = 0;
  uint64_t time_ns = 0;
  std::string text;
};

struct RawRecords {
  std::vector<gprof_task_new> starts;
  std::vector<gprof_task_rename> renames;
  std::vector<gprof_task_exit> exits;
  std::vector<gprof_futex> futexes;
  std::vector<gprof_futex_waitv> waitvs;
  std::vector<gprof_offcpu> offcpu;
  std::vector<gprof_lock_wait> lock_waits;
  std::vector<gprof_device_wait> device_waits;
  std::vector<gprof_page_fault> page_faults;
  std::vector<gprof_memory_map> memory_maps;
  std::vector<gprof_event_count> counts;
  std::vector<gprof_wait_count> wait_counts;
  std::vector<gprof_lost> lost;
  std::vector<gprof_signal> signals;
  std::map<int32_t, UserStack> user_stacks;
  std::map<int32_t, std::vector<uint64_t>> kernel_stacks;
  std::map<uint64_t, std::string> kernel_symbols;  // by address
  std::vector<MapsSnapshot> maps;
  std::vector<std::string> messages;
  uint64_t count = 0;
  uint64_t native_stacks = 0;
  uint64_t unknown = 0;
  std::string malformed;  // the first loader record that did not decode
};

// kernel.gpr record by record, for what the model folds away (exec flag, exit codes, flags).
RawRecords ReadRaw(const std::string& path, std::string* error);

std::string Comm(const char (&comm)[GPROF_COMM_LEN]);
const UserStack* FindUserStack(const RawRecords& raw, int32_t id);
// The off-CPU interval of `tid` that was in progress at `time_ns`, or null.
const gprof_offcpu* OffCpuAt(const RawRecords& raw, uint32_t tid, uint64_t time_ns);
// The longest off-CPU interval of `tid`, of those inside [from_ns, to_ns] when given; or null.
const gprof_offcpu* LongestOffCpu(const RawRecords& raw, uint32_t tid, uint64_t from_ns = 0,
                                  uint64_t to_ns = UINT64_MAX);
// The function names of kernel stack `id`, innermost first ("" for an address without one).
std::vector<std::string> KernelFrames(const RawRecords& raw, int32_t id);
bool KernelStackMentions(const RawRecords& raw, int32_t id, const std::string& word);
std::string DescribeKernelStack(const RawRecords& raw, int32_t id);

// ---- Scenarios run in a recorded child -------------------------------------------------------

// What a recorded child scenario sends back with its report: empty when it ran as planned.
struct ScenarioStatus {
  char failure[120] = {};
  void Fail(const char* why) {
    if (failure[0] == '\0') snprintf(failure, sizeof(failure), "%s", why);
  }
};

// Writes `byte` to `fd` once thread `tid` sleeps, and a little later: the wait it ends is then a
// real one.
std::thread WriteWhenAsleep(pid_t tid, int fd, char byte, ScenarioStatus* status);

// Forks a child that waits until `recorder` tracks it, runs `scenario`, sends the Report it
// returns and exits 0; polls the recorder until the child is gone, then finishes the recording.
// Reports are plain structs with a ScenarioStatus `status`.
template <typename Report>
void RunRecordedChild(KernelRecorder* recorder, const std::function<Report()>& scenario,
                      Report* report) {
  int release[2], result[2];
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(result, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char byte;
    if (read(release[0], &byte, 1) != 1) _exit(100);
    Report sent = scenario();
    (void)!write(result[1], &sent, sizeof(sent));
    _exit(0);
  }
  close(release[0]);
  close(result[1]);
  Status tracked = recorder->Track(child);
  ASSERT_TRUE(tracked.ok()) << tracked.message();
  ASSERT_EQ(write(release[1], "g", 1), 1);
  close(release[1]);
  int status = 0;
  uint64_t deadline = NowNs() + 60000 * kMs;
  while (waitpid(child, &status, WNOHANG) == 0) {
    int drained = recorder->Poll(50);
    ASSERT_GE(drained, 0) << strerror(-drained);
    if (NowNs() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the child did not finish in 60 s";
    }
  }
  ssize_t got = read(result[0], report, sizeof(*report));
  close(result[0]);
  recorder->Finish();
  EXPECT_TRUE(recorder->last_error().empty()) << recorder->last_error();
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(*report))) << "no report; wait status " << status;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(report->status.failure[0], '\0') << "child scenario failed: " << report->status.failure;
}

// ---- Code in sections of its own -------------------------------------------------------------

// Functions whose code lies in a section of its own, so that a test can tell whether a return
// address of a user stack is inside them (the linker defines __start_/__stop_ for such sections).
// They issue their system calls themselves: the kernel's user stack then starts in them, and the
// frame-pointer walk goes on through their callers.
#define GPROF_SECTION_BOUNDS(name) extern "C" const char __start_##name[], __stop_##name[]

GPROF_SECTION_BOUNDS(gprof_pipe_read);
GPROF_SECTION_BOUNDS(gprof_pipe_reader);
GPROF_SECTION_BOUNDS(gprof_pipe_write);
GPROF_SECTION_BOUNDS(gprof_deep_stack);
GPROF_SECTION_BOUNDS(gprof_spin);
GPROF_SECTION_BOUNDS(gprof_touch);

inline bool InSection(uint64_t ip, const char* start, const char* stop) {
  return ip >= reinterpret_cast<uint64_t>(start) && ip < reinterpret_cast<uint64_t>(stop);
}
#define IN_SECTION(ip, name) InSection(ip, __start_##name, __stop_##name)

long PipeReadFrame(int fd, void* buffer, size_t size);         // gprof_pipe_read
long PipeWriteFrame(int fd, const void* buffer, size_t size);  // gprof_pipe_write
long PipeReader(int fd);                                       // gprof_pipe_reader
// Blocks in a pipe read `depth` frames deep: deeper than the kernel walks (gprof_deep_stack).
long DeepRead(int depth, int fd);
// Writes a byte: a page fault, if one comes, is taken in this function (gprof_touch).
void TouchPage(char* page);
// Spins until the deadline (gprof_spin).
void SpinUntil(uint64_t deadline_ns);

// ---- The fixture -----------------------------------------------------------------------------

class KernelRecorderTest : public ::testing::Test {
 protected:
  void TearDown() override;  // removes the session dir

  // Starts a recorder in a fresh session dir; leaves recorder_ null (and the test skipped or
  // failed) when BPF cannot be used.
  void StartRecorder(const KernelRecorderOptions& options = {});

  std::string dir_;
  std::unique_ptr<KernelRecorder> recorder_;
};

}  // namespace gprof::bpf::recorder_test
