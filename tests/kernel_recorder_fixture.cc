#include "tests/kernel_recorder_fixture.h"

#include <poll.h>
#include <sys/syscall.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "collector/session/chunk_reader.h"
#include "inject/format/session_format.h"

namespace gprof::bpf::recorder_test {
namespace {

using collector::RecordView;

template <typename T>
void Collect(const RecordView& record, std::vector<T>* out) {
  T value;
  if (collector::ReadRecord(record.bytes, &value)) out->push_back(value);
}

}  // namespace

std::string MakeSessionDir() {
  char pattern[] = "/tmp/gprof-kernel-test-XXXXXX";
  const char* dir = mkdtemp(pattern);
  return dir != nullptr ? dir : "";
}

uint64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void SleepNs(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1000000000ull), static_cast<long>(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

char ThreadState(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : 0;
}

bool WaitUntilState(pid_t tid, const char* states) {
  for (int i = 0; i < 10000; ++i) {
    char state = ThreadState(tid);
    if (state != 0 && strchr(states, state) != nullptr) return true;
    SleepNs(kMs);
  }
  return false;
}

pid_t StartNoiseProcess() {
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 20000; ++i) SleepNs(500000);
    _exit(0);
  }
  return pid;
}

bool ReadFully(int fd, void* buffer, size_t size, int timeout_ms) {
  char* at = static_cast<char*>(buffer);
  while (size > 0) {
    pollfd readable{fd, POLLIN, 0};
    if (poll(&readable, 1, timeout_ms) != 1) return false;
    ssize_t got = read(fd, at, size);
    if (got <= 0) return false;
    at += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

RawRecords ReadRaw(const std::string& path, std::string* error) {
  RawRecords raw;
  std::vector<collector::Diagnostic> diagnostics;
  auto tail = [](const RecordView& record, size_t header) {
    return std::string(reinterpret_cast<const char*>(record.bytes.data()) + header,
                       record.bytes.size() - header);
  };
  auto summary = collector::ReadChunkFile(
      path,
      [&](const RecordView& record) {
        ++raw.count;
        switch (record.type) {
          case GPROF_REC_TASK_NEW:
            return Collect(record, &raw.starts);
          case GPROF_REC_TASK_RENAME:
            return Collect(record, &raw.renames);
          case GPROF_REC_TASK_EXIT:
            return Collect(record, &raw.exits);
          case GPROF_REC_FUTEX:
            return Collect(record, &raw.futexes);
          case GPROF_REC_FUTEX_WAITV:
            return Collect(record, &raw.waitvs);
          case GPROF_REC_OFFCPU:
            return Collect(record, &raw.offcpu);
          case GPROF_REC_LOCK_WAIT:
            return Collect(record, &raw.lock_waits);
          case GPROF_REC_DEVICE_WAIT:
            return Collect(record, &raw.device_waits);
          case GPROF_REC_PAGE_FAULT:
            return Collect(record, &raw.page_faults);
          case GPROF_REC_MEMORY_MAP:
            return Collect(record, &raw.memory_maps);
          case GPROF_REC_EVENT_COUNT:
            return Collect(record, &raw.counts);
          case GPROF_REC_WAIT_COUNT:
            return Collect(record, &raw.wait_counts);
          case GPROF_REC_LOST:
            return Collect(record, &raw.lost);
          case GPROF_REC_SIGNAL:
            return Collect(record, &raw.signals);
          case GPROF_REC_NATIVE_STACK:  // on-CPU samples' stack copies (native_samples_test)
            ++raw.native_stacks;
            return;
          case GPROF_REC_USER_STACK: {
            gprof_user_stack stack;
            if (!collector::ReadRecord(record.bytes, &stack) ||
                record.bytes.size() != sizeof(stack) + stack.depth * sizeof(uint64_t)) {
              raw.malformed = "user stack";
              return;
            }
            UserStack& out = raw.user_stacks[stack.stack_id];
            out.flags = stack.flags;
            out.ips.resize(stack.depth);
            memcpy(out.ips.data(), record.bytes.data() + sizeof(stack),
                   stack.depth * sizeof(uint64_t));
            return;
          }
          case GPROF_REC_PROCESS_MAPS: {
            gprof_process_maps maps;
            if (!collector::ReadRecord(record.bytes, &maps) ||
                record.bytes.size() != sizeof(maps) + maps.text_len) {
              raw.malformed = "process maps";
              return;
            }
            raw.maps.push_back({maps.pid, maps.time_ns, tail(record, sizeof(maps))});
            return;
          }
          case format::kMessage: {
            format::MessageRecord message;
            if (!collector::ReadRecord(record.bytes, &message)) {
              raw.malformed = "message";
              return;
            }
            raw.messages.push_back(tail(record, sizeof(message)));
            return;
          }
          case GPROF_REC_KERNEL_STACK: {
            gprof_kernel_stack stack;
            if (!collector::ReadRecord(record.bytes, &stack) ||
                record.bytes.size() != sizeof(stack) + stack.depth * sizeof(uint64_t)) {
              raw.malformed = "kernel stack";
              return;
            }
            std::vector<uint64_t>& ips = raw.kernel_stacks[stack.stack_id];
            ips.resize(stack.depth);
            memcpy(ips.data(), record.bytes.data() + sizeof(stack), stack.depth * sizeof(uint64_t));
            return;
          }
          case GPROF_REC_KERNEL_SYMBOL: {
            gprof_kernel_symbol symbol;
            if (!collector::ReadRecord(record.bytes, &symbol) ||
                record.bytes.size() != sizeof(symbol) + symbol.name_len) {
              raw.malformed = "kernel symbol";
              return;
            }
            raw.kernel_symbols[symbol.address] = tail(record, sizeof(symbol));
            return;
          }
          default:
            ++raw.unknown;
        }
      },
      &diagnostics);
  if (!summary.ok()) {
    *error = summary.status().message();
  } else if (!diagnostics.empty()) {
    *error = diagnostics.front().message;
  } else if (!raw.malformed.empty()) {
    *error = "malformed " + raw.malformed + " record";
  }
  return raw;
}

std::string Comm(const char (&comm)[GPROF_COMM_LEN]) {
  return std::string(comm, strnlen(comm, GPROF_COMM_LEN));
}

const UserStack* FindUserStack(const RawRecords& raw, int32_t id) {
  auto found = raw.user_stacks.find(id);
  return found == raw.user_stacks.end() ? nullptr : &found->second;
}

const gprof_offcpu* OffCpuAt(const RawRecords& raw, uint32_t tid, uint64_t time_ns) {
  for (const auto& o : raw.offcpu) {
    if (o.tid == tid && o.start_ns <= time_ns && o.end_ns >= time_ns) return &o;
  }
  return nullptr;
}

const gprof_offcpu* LongestOffCpu(const RawRecords& raw, uint32_t tid, uint64_t from_ns,
                                  uint64_t to_ns) {
  const gprof_offcpu* longest = nullptr;
  for (const auto& o : raw.offcpu) {
    if (o.tid == tid && o.start_ns >= from_ns && o.end_ns <= to_ns &&
        (longest == nullptr || o.end_ns - o.start_ns > longest->end_ns - longest->start_ns)) {
      longest = &o;
    }
  }
  return longest;
}

std::vector<std::string> KernelFrames(const RawRecords& raw, int32_t id) {
  std::vector<std::string> names;
  auto stack = raw.kernel_stacks.find(id);
  if (stack == raw.kernel_stacks.end()) return names;
  for (uint64_t ip : stack->second) {
    auto symbol = raw.kernel_symbols.find(ip);
    names.push_back(symbol == raw.kernel_symbols.end() ? "" : symbol->second);
  }
  return names;
}

bool KernelStackMentions(const RawRecords& raw, int32_t id, const std::string& word) {
  for (const std::string& name : KernelFrames(raw, id)) {
    if (name.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string DescribeKernelStack(const RawRecords& raw, int32_t id) {
  std::string text = "kernel stack " + std::to_string(id) + ":";
  for (const std::string& name : KernelFrames(raw, id)) text += "\n    " + name;
  return text;
}

std::thread WriteWhenAsleep(pid_t tid, int fd, char byte, ScenarioStatus* status) {
  return std::thread([=] {
    if (!WaitUntilState(tid, "S")) status->Fail("the waiting thread never slept");
    SleepNs(30 * kMs);
    if (write(fd, &byte, 1) != 1) status->Fail("write");
  });
}

// GCC builds a leaf function without a frame even with -fno-omit-frame-pointer: taking the frame's
// address makes it keep one.
#define GPROF_TEST_SECTION(name) __attribute__((noinline, section(#name)))

GPROF_TEST_SECTION(gprof_pipe_read) long PipeReadFrame(int fd, void* buffer, size_t size) {
  long ret;
  asm volatile("" : : "r"(__builtin_frame_address(0)));
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_read)), "D"(fd), "S"(buffer), "d"(size)
               : "rcx", "r11", "memory");
  return ret;
}

GPROF_TEST_SECTION(gprof_pipe_write) long PipeWriteFrame(int fd, const void* buffer, size_t size) {
  long ret;
  asm volatile("" : : "r"(__builtin_frame_address(0)));
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_write)), "D"(fd), "S"(buffer), "d"(size)
               : "rcx", "r11", "memory");
  return ret;
}

GPROF_TEST_SECTION(gprof_pipe_reader) long PipeReader(int fd) {
  char byte = 0;
  long got = PipeReadFrame(fd, &byte, 1);
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return got;
}

// Blocks in a pipe read `depth` frames deep: deeper than the kernel walks.
GPROF_TEST_SECTION(gprof_deep_stack) long DeepRead(int depth, int fd) {
  if (depth == 0) return PipeReader(fd);
  long got = DeepRead(depth - 1, fd);
  asm volatile("" ::: "memory");
  return got;
}

// Writes a byte: a page fault, if one comes, is taken in this function.
GPROF_TEST_SECTION(gprof_touch) void TouchPage(char* page) {
  asm volatile("" : : "r"(__builtin_frame_address(0)));
  *static_cast<volatile char*>(page) = 1;
}

// Spins until the deadline, reading the clock only every million iterations: a preemption
// finds it in its own code, not in the clock's.
GPROF_TEST_SECTION(gprof_spin) void SpinUntil(uint64_t deadline_ns) {
  while (NowNs() < deadline_ns) {
    for (int i = 0; i < 1000000; ++i) asm volatile("" ::: "memory");
  }
}

void KernelRecorderTest::TearDown() {
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

void KernelRecorderTest::StartRecorder(const KernelRecorderOptions& options) {
  GPROF_NEED_BPF();
  dir_ = MakeSessionDir();
  ASSERT_FALSE(dir_.empty()) << strerror(errno);
  auto started = KernelRecorder::Start(dir_, options);
  if (!started.ok() && started.status().code() == StatusCode::kPermissionDenied) {
    GPROF_SKIP_OR_FAIL("BPF load refused: " + started.status().message());
  }
  ASSERT_TRUE(started.ok()) << started.status().message();
  recorder_ = std::move(*started);
  ASSERT_NE(recorder_, nullptr);
}

}  // namespace gprof::bpf::recorder_test
