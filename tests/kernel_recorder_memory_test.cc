// The kernel recorder on memory: page faults that wait on the mmap_lock while another thread
// unmaps, and the mmap of a file named. Shared helpers: kernel_recorder_fixture.h.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "bpf/kernel_recorder.h"
#include "collector/session/session_reader.h"
#include "tests/kernel_recorder_fixture.h"

namespace gprof::bpf::recorder_test {
namespace {

// munmap of a large populated region while other threads need the mmap_lock. Since Linux 6.1
// munmap frees the pages with the lock downgraded to read, and faults take per-VMA locks: a
// faulting thread waits only behind a queued writer (here a thread calling mmap). Both wait on
// the process's mmap_lock held for reading, and the lock's reader hint names the munmapping
// thread. An mmap(MAP_FIXED) over a populated region unmaps it with the lock held for writing:
// the faulting thread then waits on the writer itself. Each waiting fault is a slow page fault.
TEST_F(KernelRecorderTest, MunmapHoldsTheMmapLockWhileAnotherThreadFaults) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  constexpr size_t kRegion = 512ul << 20;
  struct Report {
    ScenarioStatus status;
    uint32_t pid, unmapper, writer, faulter;
    uint64_t region, munmap_start_ns, munmap_end_ns;
    uint64_t replaced, replace_start_ns, replace_end_ns;
    uint64_t fault_pages[2];  // the faulter's page during the munmap, and during the replacement
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [] {
        Report r{};
        // Fresh one-page mappings, kept apart by PROT_NONE pages: the first fault of each needs the
        // mmap_lock (a new anon_vma), the way first touches of fresh memory do.
        char* fresh = static_cast<char*>(
            mmap(nullptr, 4 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (fresh == MAP_FAILED || mprotect(fresh, 4096, PROT_READ | PROT_WRITE) != 0 ||
            mprotect(fresh + 2 * 4096, 4096, PROT_READ | PROT_WRITE) != 0) {
          r.status.Fail("fresh pages");
          return r;
        }
        r.fault_pages[0] = reinterpret_cast<uint64_t>(fresh);
        r.fault_pages[1] = reinterpret_cast<uint64_t>(fresh + 2 * 4096);
        auto populate = [&]() -> char* {
          char* region = static_cast<char*>(
              mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
          if (region == MAP_FAILED) return nullptr;
          madvise(region, kRegion, MADV_NOHUGEPAGE);  // 4 KiB pages: a long unmap
          for (size_t at = 0; at < kRegion; at += 4096) region[at] = 1;
          return region;
        };
        std::atomic<int> phase{0};
        std::atomic<pid_t> unmapper{0}, writer{0}, faulter{0};
        std::thread unmapper_thread([&] {
          pthread_setname_np(pthread_self(), "gp-unmapper");
          unmapper = gettid();
          char* region = populate();
          if (region == nullptr) {
            r.status.Fail("mmap");
            phase = 99;
            return;
          }
          r.region = reinterpret_cast<uint64_t>(region);
          r.munmap_start_ns = NowNs();
          phase = 1;
          munmap(region, kRegion);
          r.munmap_end_ns = NowNs();
          while (phase < 2) sched_yield();
          region = populate();
          if (region == nullptr) {
            r.status.Fail("mmap again");
            phase = 99;
            return;
          }
          r.replace_start_ns = NowNs();
          phase = 3;
          void* replaced = mmap(region, kRegion, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
          r.replace_end_ns = NowNs();
          r.replaced = reinterpret_cast<uint64_t>(replaced);
          munmap(replaced, kRegion);
        });
        std::thread writer_thread([&] {
          writer = gettid();
          while (phase < 1) sched_yield();
          SleepNs(2 * kMs);
          void* small = mmap(nullptr, 65536, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          if (small != MAP_FAILED) munmap(small, 65536);
        });
        std::thread faulter_thread([&] {
          faulter = gettid();
          // Reading /proc allocates: this thread's first malloc maps a new arena, an mmap that
          // would itself queue behind the munmap. Make it now, before the munmap starts.
          ThreadState(faulter);
          while (phase < 1) sched_yield();
          if (phase == 99) return;
          // Behind the writer, once it waits (mmap_write_lock_killable: state D).
          while (writer == 0) sched_yield();
          if (!WaitUntilState(writer, "D")) r.status.Fail("the writer never waited");
          TouchPage(fresh);
          phase = 2;
          while (phase < 3) sched_yield();
          if (phase == 99) return;
          SleepNs(3 * kMs);
          fresh[2 * 4096] = 1;
        });
        unmapper_thread.join();
        writer_thread.join();
        faulter_thread.join();
        r.pid = static_cast<uint32_t>(getpid());
        r.unmapper = static_cast<uint32_t>(unmapper);
        r.writer = static_cast<uint32_t>(writer);
        r.faulter = static_cast<uint32_t>(faulter);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;

  // The munmap and the replacing mmap, with their sizes and durations.
  const gprof_memory_map* munmap_call = nullptr;
  const gprof_memory_map* replace_call = nullptr;
  for (const auto& m : raw.memory_maps) {
    if (m.tid != report.unmapper || m.length != kRegion) continue;
    // The region is unmapped twice (the second time once replaced): the first is the one.
    if (m.syscall_nr == SYS_munmap && m.address == report.region &&
        m.start_ns >= report.munmap_start_ns && m.start_ns <= report.munmap_end_ns) {
      munmap_call = &m;
    }
    if (m.syscall_nr == SYS_mmap && (m.flags & MAP_FIXED)) replace_call = &m;
  }
  ASSERT_NE(munmap_call, nullptr) << "no munmap of the 512 MB region";
  EXPECT_EQ(munmap_call->ret, 0);
  EXPECT_GE(munmap_call->start_ns, report.munmap_start_ns);
  EXPECT_LE(munmap_call->end_ns, report.munmap_end_ns);
  EXPECT_GE(munmap_call->end_ns - munmap_call->start_ns, 5 * kMs);
  ASSERT_NE(replace_call, nullptr) << "no mmap(MAP_FIXED) over the region";
  EXPECT_EQ(replace_call->address, report.replaced);
  EXPECT_EQ(static_cast<uint64_t>(replace_call->ret), report.replaced);
  EXPECT_EQ(replace_call->prot, static_cast<uint32_t>(PROT_READ | PROT_WRITE));

  auto lock_wait_of = [&](uint32_t tid, uint64_t from, uint64_t to) -> const gprof_lock_wait* {
    for (const auto& w : raw.lock_waits) {
      if (w.tid == tid && (w.flags & GPROF_LOCK_MMAP_LOCK) && w.start_ns >= from &&
          w.start_ns <= to) {
        return &w;
      }
    }
    return nullptr;
  };
  auto slow_fault_of = [&](uint64_t page) -> const gprof_page_fault* {
    for (const auto& f : raw.page_faults) {
      if (f.tid == report.faulter && f.address == page) return &f;
    }
    return nullptr;
  };

  {
    SCOPED_TRACE("munmap");
    const uint64_t from = munmap_call->start_ns, to = munmap_call->end_ns;
    const gprof_lock_wait* writer_wait = lock_wait_of(report.writer, from, to);
    ASSERT_NE(writer_wait, nullptr) << "the mmap of the writer did not wait on the mmap_lock";
    EXPECT_EQ(writer_wait->flags,
              GPROF_LOCK_WRITE | GPROF_LOCK_MMAP_LOCK | GPROF_LOCK_READER_OWNED);
    EXPECT_EQ(writer_wait->owner_tid, report.unmapper);
    EXPECT_EQ(Comm(writer_wait->owner_comm), "gp-unmapper");
    const gprof_lock_wait* fault_wait = lock_wait_of(report.faulter, from, to);
    ASSERT_NE(fault_wait, nullptr) << "the faulting thread did not wait on the mmap_lock";
    EXPECT_EQ(fault_wait->flags, GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK | GPROF_LOCK_READER_OWNED);
    EXPECT_EQ(fault_wait->owner_tid, report.unmapper);
    EXPECT_EQ(fault_wait->owner_pid, report.pid);
    EXPECT_EQ(fault_wait->ret, 0);
    // Queued behind the writer (asleep on the lock before the page was touched), it gets the
    // lock only once the munmap has released it and the writer has had its turn. The munmap's
    // return is no bound: it frees the unmapped areas after unlocking, and a preemption there
    // (a loaded CI machine) lets both waiters through before it returns.
    EXPECT_GE(fault_wait->end_ns, writer_wait->end_ns) << "it waits behind the writer";
    EXPECT_TRUE(KernelStackMentions(raw, fault_wait->kstack_id, "fault"))
        << DescribeKernelStack(raw, fault_wait->kstack_id);
    // Asleep in a page fault, not in a system call: the stacks of the fault.
    const gprof_offcpu* sleep =
        LongestOffCpu(raw, report.faulter, fault_wait->start_ns, fault_wait->end_ns);
    ASSERT_NE(sleep, nullptr) << "no off-CPU interval in the faulting thread's lock wait";
    EXPECT_TRUE(KernelStackMentions(raw, sleep->kstack_id, "exc_page_fault"))
        << DescribeKernelStack(raw, sleep->kstack_id);
    const UserStack* sleep_stack = FindUserStack(raw, sleep->user_stack_id);
    ASSERT_NE(sleep_stack, nullptr) << "no user stack: " << sleep->user_stack_id;
    ASSERT_FALSE(sleep_stack->ips.empty());
    EXPECT_TRUE(IN_SECTION(sleep_stack->ips[0], gprof_touch)) << std::hex << sleep_stack->ips[0];
    const gprof_page_fault* fault = slow_fault_of(report.fault_pages[0]);
    ASSERT_NE(fault, nullptr) << "no slow page fault of the faulting thread";
    EXPECT_LE(fault->start_ns, fault_wait->start_ns);
    EXPECT_GE(fault->end_ns, fault_wait->end_ns);
    EXPECT_EQ(fault->flags, 0x41u) << "FAULT_FLAG_WRITE | FAULT_FLAG_USER";
    EXPECT_EQ(fault->pid, report.pid);
  }
  {
    SCOPED_TRACE("mmap(MAP_FIXED)");
    const uint64_t from = replace_call->start_ns, to = replace_call->end_ns;
    const gprof_lock_wait* fault_wait = lock_wait_of(report.faulter, from, to);
    ASSERT_NE(fault_wait, nullptr) << "the faulting thread did not wait on the mmap_lock";
    EXPECT_EQ(fault_wait->flags, GPROF_LOCK_READ | GPROF_LOCK_MMAP_LOCK) << "held for writing";
    EXPECT_EQ(fault_wait->owner_tid, report.unmapper);
    EXPECT_EQ(fault_wait->owner_pid, report.pid);
    EXPECT_EQ(Comm(fault_wait->owner_comm), "gp-unmapper");
    EXPECT_GE(fault_wait->end_ns, to - kMs);
    const gprof_page_fault* fault = slow_fault_of(report.fault_pages[1]);
    ASSERT_NE(fault, nullptr) << "no slow page fault of the faulting thread";
    EXPECT_LE(fault->start_ns, fault_wait->start_ns);
    EXPECT_GE(fault->end_ns, fault_wait->end_ns);
  }
  // The populating thread's hundreds of thousands of quick faults are counted, not recorded.
  uint64_t quick = 0;
  for (const auto& c : raw.counts) {
    if (c.kind == GPROF_COUNT_QUICK_PAGE_FAULTS && c.tid == report.unmapper) {
      quick += c.count;
      EXPECT_EQ(c.limit_ns, 50000u);
      EXPECT_EQ(c.cpu, GPROF_ALL_CPUS);
      EXPECT_EQ(c.pid, report.pid);
    }
  }
  EXPECT_GE(quick, kRegion / 4096);
}

// An mmap of a file names it (its dentry's name, cut to fit the record), however short the
// process lives: what says which libraries it loaded (issue 17: processes that load CUDA without
// the injected library). Anonymous memory and the other calls name nothing.
TEST_F(KernelRecorderTest, MmapOfAFileNamesTheFile) {
  StartRecorder();
  if (recorder_ == nullptr) return;
  const std::string long_name = dir_ + "/libgprof-test-a-name-longer-than-the-record.so.1";
  const std::string short_name = dir_ + "/data.bin";
  for (const std::string& path : {long_name, short_name}) {
    std::ofstream(path) << std::string(8192, 'x');
  }
  struct Report {
    ScenarioStatus status;
    uint64_t code, data, anonymous;
  };
  Report report{};
  ASSERT_NO_FATAL_FAILURE(RunRecordedChild<Report>(
      recorder_.get(),
      [&] {
        Report r{};
        int code_fd = open(long_name.c_str(), O_RDONLY);
        int data_fd = open(short_name.c_str(), O_RDONLY);
        void* code = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, code_fd, 0);
        void* data = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, data_fd, 4096);
        void* anonymous =
            mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (code == MAP_FAILED || data == MAP_FAILED || anonymous == MAP_FAILED) {
          r.status.Fail("mmap");
          return r;
        }
        munmap(code, 4096);
        r.code = reinterpret_cast<uint64_t>(code);
        r.data = reinterpret_cast<uint64_t>(data);
        r.anonymous = reinterpret_cast<uint64_t>(anonymous);
        return r;
      },
      &report));
  std::string error;
  RawRecords raw = ReadRaw(dir_ + "/kernel.gpr", &error);
  ASSERT_TRUE(error.empty()) << error;
  auto file_of = [](const gprof_memory_map& m) {
    return std::string(m.file, strnlen(m.file, sizeof(m.file)));
  };
  std::map<std::pair<long, uint64_t>, std::string> named;  // (syscall, address) -> file
  for (const auto& m : raw.memory_maps) {
    uint64_t address = static_cast<uint64_t>(m.address);
    if (address == report.code || address == report.data || address == report.anonymous)
      named[{m.syscall_nr, address}] = file_of(m);
    EXPECT_EQ(m.file[sizeof(m.file) - 1], '\0') << "NUL-terminated";
  }
  std::string cut =
      std::filesystem::path(long_name).filename().string().substr(0, GPROF_FILE_NAME_LEN - 1);
  auto name_at = [&](long syscall, uint64_t address) {
    auto it = named.find({syscall, address});
    return it == named.end() ? std::string("(no record)") : it->second;
  };
  EXPECT_EQ(name_at(SYS_mmap, report.code), cut);
  EXPECT_EQ(name_at(SYS_mmap, report.data), "data.bin");
  EXPECT_EQ(name_at(SYS_mmap, report.anonymous), "");
  EXPECT_EQ(name_at(SYS_munmap, report.code), "");

  // The collector keeps the executable one as a library the process loaded.
  auto session = collector::ReadSession(dir_);
  ASSERT_TRUE(session.ok()) << session.status().message();
  bool loaded = false;
  for (const auto& [pid, process] : session->processes) {
    for (const auto& file : process.loaded_files) loaded |= file.name == cut;
  }
  EXPECT_TRUE(loaded);
}

}  // namespace
}  // namespace gprof::bpf::recorder_test
