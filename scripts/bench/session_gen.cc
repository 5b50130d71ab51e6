// bench_session_gen: writes a synthetic session directory of a chosen size, the input of the
// collector's scale benchmark (scripts/bench/collector_scale.py, issue 6).
//
// usage: bench_session_gen DIR EVENTS [--threads N]
//
// DIR (created; it must not exist or be empty) gets what gprof-run writes for one process: a
// session.json like cli/session_directory.cc writes, inject-<pid>.gpr (process info, capture mode,
// CUDA API names, thread names, a maps snapshot, then CUDA call records) and kernel.gpr (the
// loader's maps record, off-CPU intervals with their wakers and kernel stacks, futex calls, each
// kernel stack the first time an interval names it, the symbols of every stack address at the end),
// written through the real ChunkFileWriter in chunks of up to 1 MiB, as the injected library's
// writer thread and the kernel recorder stage them.
//
// The threads work in pairs (2k, 2k+1) that hand a futex word to each other. Each thread, each
// iteration of about 50 us: one CUDA call (cudaLaunchKernel, cudaMemcpyAsync or cudaEventRecord,
// 5 us), one futex wait of ~20 us (FUTEX_WAIT_BITSET on a heap word, a hand-over) holding one
// off-CPU interval (kernel stack: futex_wait_queue), woken by its partner's futex wake (waker
// kernel stack: futex_wake). One iteration in 97 of each pair is slow, as the cudaFree freeze of
// design.md section 6: the even thread's CUDA call blocks 1.2-3 ms in a FUTEX_WAIT on a lock word
// in libcuda's data while the odd thread sits on-CPU in cudaFree and wakes it when that returns,
// so the collector's slow-call analysis and diagnosis have calls over 1 ms to explain (about 1% of
// the CUDA calls). Times increase, on CLOCK_MONOTONIC, from 1000 s; the other pairs wait for a
// pair's slow iteration (each iteration starts when every pair finished the previous one).
//
// EVENTS counts every record of both files, names, stacks and symbols included; the loop stops when
// the next iteration's records and the symbols still to write would pass it (so the total may fall
// short by up to one iteration's records, 8). It prints one line of counts per record kind.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collector/session/session_reader.h"
#include "inject/format/kernel_events.h"
#include "inject/format/session_format.h"
#include "inject/shared/chunk_file_writer.h"

namespace {

namespace fs = std::filesystem;
using namespace gprof;

constexpr size_t kStagingBytes = 1u << 20;  // both real writers stage this much per chunk
constexpr uint32_t kPid = 41000;
constexpr uint64_t kStartNs = 1'000'000'000'000;  // CLOCK_MONOTONIC ~1000 s after boot
constexpr uint64_t kUs = 1000;
constexpr uint64_t kHeapBase = 0x55d0c0a00000;    // the pairs' hand-over words: in the heap
constexpr uint64_t kDriverData = 0x7f3a44200000;  // the driver's lock words: in libcuda's data
constexpr uint64_t kKernelText = 0xffffffff81000000;
constexpr uint32_t kFutexWaitBitsetPrivate = 9 | 128;
constexpr uint32_t kFutexWaitPrivate = 0 | 128;
constexpr uint32_t kFutexWakePrivate = 1 | 128;
constexpr int kSlowEvery = 97;  // iterations; one slow iteration per pair in this many

enum ApiId : uint32_t { kLaunch = 1, kMemcpyAsync = 2, kEventRecord = 3, kFree = 4 };
const std::pair<uint32_t, std::string_view> kApiNames[] = {
    {kLaunch, "cudaLaunchKernel"},
    {kMemcpyAsync, "cudaMemcpyAsync"},
    {kEventRecord, "cudaEventRecord"},
    {kFree, "cudaFree"},
};

// One session file and its staging buffer: records are appended, a chunk is written whenever the
// next record would not fit, as SessionWriter::Append and the kernel recorder do.
class StagedFile {
 public:
  bool Create(const std::string& path, format::Source source, uint32_t pid) {
    int error = file_.Create(path.c_str(), source, pid);
    if (error != 0) {
      fprintf(stderr, "bench_session_gen: cannot create %s: %s\n", path.c_str(), strerror(error));
      return false;
    }
    path_ = path;
    return true;
  }
  // Appends `record` (its header's size and type filled in here) and `tail` bytes after it.
  template <typename Record>
  void Add(Record record, uint16_t type, std::string_view tail = {}) {
    format::RecordHeader header{static_cast<uint32_t>(sizeof(Record) + tail.size()), type, 0};
    memcpy(&record, &header, sizeof(header));
    if (staged_.size() + header.size > kStagingBytes) Flush();
    staged_.append(reinterpret_cast<const char*>(&record), sizeof(record));
    staged_.append(tail);
    ++staged_records_;
    ++records_;
    ++by_type_[type];
  }
  bool Flush() {
    if (staged_.empty()) return ok_;
    int error = file_.Write(staged_.data(), staged_.size(), staged_records_);
    if (error != 0 && ok_) {
      fprintf(stderr, "bench_session_gen: cannot write %s: %s\n", path_.c_str(), strerror(error));
      ok_ = false;
    }
    staged_.clear();
    staged_records_ = 0;
    return ok_;
  }
  bool Close() {
    bool ok = Flush();
    file_.Close();
    return ok;
  }
  uint64_t records() const { return records_; }
  uint64_t chunks() const { return file_.chunks_written(); }
  const std::map<uint16_t, uint64_t>& by_type() const { return by_type_; }

 private:
  ChunkFileWriter file_;
  std::string path_;
  std::string staged_;
  uint32_t staged_records_ = 0;
  uint64_t records_ = 0;
  std::map<uint16_t, uint64_t> by_type_;
  bool ok_ = true;
};

// A kernel function at a fixed address; frames are return addresses inside it.
struct KernelFunction {
  std::string_view name;
  uint64_t address;
};

// The pool of kernel stacks: sleeping in a futex wait (the off-CPU intervals' stacks) and waking
// one (the wakers'), each a distinct mix of call sites, as stack ids of a real run are.
class KernelStacks {
 public:
  KernelStacks(int wait_stacks, int wake_stacks, std::mt19937_64* random) {
    static constexpr std::string_view kWaitPath[] = {
        "__schedule", "schedule", "futex_wait_queue", "__futex_wait",
        "futex_wait", "do_futex", "__x64_sys_futex"};
    static constexpr std::string_view kWakePath[] = {"try_to_wake_up", "wake_up_q", "futex_wake",
                                                     "do_futex", "__x64_sys_futex"};
    static constexpr std::string_view kEntry[] = {"x64_sys_call", "do_syscall_64",
                                                  "entry_SYSCALL_64_after_hwframe"};
    // Frames a syscall picks up on the way in, on some paths only.
    static constexpr std::string_view kOptional[] = {
        "syscall_exit_to_user_mode",   "exit_to_user_mode_loop",  "arch_do_signal_or_restart",
        "__rseq_handle_notify_resume", "fpregs_restore_userregs", "irqentry_exit_to_user_mode"};
    uint64_t next_address = kKernelText;
    auto function = [&](std::string_view name) {
      auto [it, inserted] = functions_.try_emplace(name, next_address);
      if (inserted) next_address += 0x1000 + (name.size() << 6);
      return it->second;
    };
    auto make = [&](std::span<const std::string_view> path, int count, std::vector<int32_t>* ids) {
      for (int i = 0; i < count; ++i) {
        std::vector<uint64_t> ips;
        auto frame = [&](std::string_view name, uint64_t max_offset) {
          ips.push_back(function(name) + 0x10 + ((*random)() % max_offset) * 4);
        };
        for (std::string_view name : path) frame(name, 24);
        if ((*random)() % 3 == 0) frame(kOptional[(*random)() % std::size(kOptional)], 16);
        for (std::string_view name : kEntry) frame(name, name == kEntry[2] ? 1 : 8);
        int32_t id;
        do id = static_cast<int32_t>((*random)() % 16384);
        while (!used_ids_.insert(id).second);
        ids->push_back(id);
        stacks_[id] = std::move(ips);
      }
    };
    make(kWaitPath, wait_stacks, &wait_ids_);
    make(kWakePath, wake_stacks, &wake_ids_);
  }

  int32_t WaitStack(uint64_t key) const { return wait_ids_[Mix(key) % wait_ids_.size()]; }
  int32_t WakeStack(uint64_t key) const { return wake_ids_[Mix(key) % wake_ids_.size()]; }

  // Stack `id` in `file` the first time it is named; false when it was written already.
  bool Note(int32_t id, StagedFile* file) {
    if (!written_.insert(id).second) return false;
    const std::vector<uint64_t>& ips = stacks_.at(id);
    gprof_kernel_stack record{};
    record.stack_id = id;
    record.depth = static_cast<uint32_t>(ips.size());
    file->Add(record, GPROF_REC_KERNEL_STACK,
              std::string_view(reinterpret_cast<const char*>(ips.data()), ips.size() * 8));
    for (uint64_t ip : ips) addresses_.insert(ip);
    return true;
  }
  // Records Note(id) would add now: the stack and its addresses not named yet.
  uint64_t CostOfNoting(int32_t id) const {
    if (written_.count(id) != 0) return 0;
    uint64_t cost = 1;
    for (uint64_t ip : stacks_.at(id)) cost += addresses_.count(ip) == 0;
    return cost;
  }
  uint64_t pending_symbols() const { return addresses_.size(); }

  // The loader's symbols of every address of the stacks written, at the end, as EmitSymbols does.
  void WriteSymbols(StagedFile* file) const {
    std::map<uint64_t, std::string_view> functions;  // by start address
    for (const auto& [name, address] : functions_) functions[address] = name;
    for (uint64_t address : addresses_) {
      auto function = std::prev(functions.upper_bound(address));
      gprof_kernel_symbol record{};
      record.address = address;
      record.offset = static_cast<uint32_t>(address - function->first);
      record.name_len = static_cast<uint32_t>(function->second.size());
      file->Add(record, GPROF_REC_KERNEL_SYMBOL, function->second);
    }
  }
  size_t size() const { return stacks_.size(); }
  size_t written() const { return written_.size(); }

 private:
  static uint64_t Mix(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return key;
  }

  std::map<std::string_view, uint64_t> functions_;
  std::map<int32_t, std::vector<uint64_t>> stacks_;
  std::set<int32_t> used_ids_;
  std::vector<int32_t> wait_ids_, wake_ids_;
  std::set<int32_t> written_;
  std::set<uint64_t> addresses_;
};

std::string ThreadName(uint32_t index) {
  return index == 0 ? "python3" : "worker-" + std::to_string(index);
}

std::string MapsText() {
  return "55d0bfe00000-55d0c0000000 r--p 00000000 fd:01 131090 /opt/bench/bin/python3\n"
         "55d0c0000000-55d0c0400000 r-xp 00200000 fd:01 131090 /opt/bench/bin/python3\n"
         "55d0c0800000-55d0c0900000 rw-p 00600000 fd:01 131090 /opt/bench/bin/python3\n"
         "55d0c0a00000-55d0c4a00000 rw-p 00000000 00:00 0 [heap]\n"
         "7f3a40000000-7f3a44000000 r-xp 00000000 fd:01 262201 /opt/bench/lib/libcuda.so.1\n"
         "7f3a44200000-7f3a44400000 rw-p 04000000 fd:01 262201 /opt/bench/lib/libcuda.so.1\n"
         "7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 [stack]\n";
}

class Generator {
 public:
  Generator(uint64_t events, uint32_t threads)
      : budget_(events), threads_(threads), random_(20261129), stacks_(240, 60, &random_) {}

  bool Run(const std::string& dir) {
    if (!inject_.Create((fs::path(dir) / ("inject-" + std::to_string(kPid) + ".gpr")).string(),
                        format::Source::kInject, kPid) ||
        !kernel_.Create((fs::path(dir) / collector::kKernelFile).string(), format::Source::kKernel,
                        kPid - 1)) {  // the kernel recorder's file names gprof-run
      return false;
    }
    WriteInjectPreamble();
    WriteKernelPreamble();
    uint64_t now = kStartNs + 2'000 * kUs;  // the program starts its work 2 ms in
    for (uint64_t iteration = 0;; ++iteration) {
      uint64_t longest = 0;
      bool stopped = false;
      for (uint32_t pair = 0; pair < threads_ / 2; ++pair) {
        bool slow = (iteration + pair * 31) % kSlowEvery == kSlowEvery - 1;
        uint64_t span = 0;
        if (!Iteration(iteration, pair, now + pair * 700, slow, &span)) {
          stopped = true;
          break;
        }
        longest = std::max(longest, pair * 700 + span);
      }
      if (stopped) break;
      now += longest;
    }
    end_ns_ = now + 1'000 * kUs;
    stacks_.WriteSymbols(&kernel_);
    return inject_.Close() && kernel_.Close();
  }

  uint64_t end_ns() const { return end_ns_; }

  void PrintCounts(FILE* out) const {
    fprintf(out,
            "bench_session_gen: records=%llu inject_records=%llu kernel_records=%llu "
            "cuda_calls=%llu futex_calls=%llu offcpu=%llu slow_calls=%llu kernel_stacks=%zu "
            "kernel_symbols=%llu inject_chunks=%llu kernel_chunks=%llu threads=%u "
            "session_seconds=%.3f\n",
            static_cast<unsigned long long>(inject_.records() + kernel_.records()),
            static_cast<unsigned long long>(inject_.records()),
            static_cast<unsigned long long>(kernel_.records()),
            static_cast<unsigned long long>(Count(inject_, format::kApiCall)),
            static_cast<unsigned long long>(Count(kernel_, GPROF_REC_FUTEX)),
            static_cast<unsigned long long>(Count(kernel_, GPROF_REC_OFFCPU)),
            static_cast<unsigned long long>(slow_calls_), stacks_.written(),
            static_cast<unsigned long long>(Count(kernel_, GPROF_REC_KERNEL_SYMBOL)),
            static_cast<unsigned long long>(inject_.chunks()),
            static_cast<unsigned long long>(kernel_.chunks()), threads_,
            static_cast<double>(end_ns_ - kStartNs) / 1e9);
  }

 private:
  static uint64_t Count(const StagedFile& file, uint16_t type) {
    auto it = file.by_type().find(type);
    return it == file.by_type().end() ? 0 : it->second;
  }
  uint64_t written() const { return inject_.records() + kernel_.records(); }
  uint32_t Tid(uint32_t index) const { return kPid + index; }

  void WriteInjectPreamble() {
    std::string exe = "/opt/bench/bin/python3";
    std::string cmdline = std::string("python3\0train.py\0", 17);
    format::ProcessInfoRecord info{};
    info.pid = kPid;
    info.ppid = kPid - 1;
    info.time_ns = kStartNs + 300 * kUs;
    info.exe_len = static_cast<uint32_t>(exe.size());
    info.cmdline_len = static_cast<uint32_t>(cmdline.size());
    inject_.Add(info, format::kProcessInfo, exe + cmdline);

    std::string note = "CUDA runtime functions interposed (synthetic session)";
    format::CaptureInfoRecord capture{};
    capture.time_ns = kStartNs + 310 * kUs;
    capture.mode = static_cast<uint32_t>(format::CaptureMode::kInterposition);
    capture.text_len = static_cast<uint32_t>(note.size());
    inject_.Add(capture, format::kCaptureInfo, note);

    for (const auto& [id, name] : kApiNames) {
      format::ApiNameRecord record{};
      record.api_id = id;
      record.domain = static_cast<uint32_t>(format::ApiDomain::kRuntime);
      record.name_len = static_cast<uint32_t>(name.size());
      inject_.Add(record, format::kApiName, name);
    }
    for (uint32_t index = 0; index < threads_; ++index) {
      format::ThreadNameRecord record{};
      record.tid = Tid(index);
      record.time_ns = kStartNs + 320 * kUs;
      std::string name = ThreadName(index);
      memcpy(record.name, name.data(), std::min(name.size(), sizeof(record.name) - 1));
      inject_.Add(record, format::kThreadName);
    }
    std::string maps = MapsText();
    format::MapsSnapshotRecord snapshot{};
    snapshot.time_ns = kStartNs + 330 * kUs;
    snapshot.text_len = static_cast<uint32_t>(maps.size());
    inject_.Add(snapshot, format::kMapsSnapshot, maps);
  }

  void WriteKernelPreamble() {
    std::string maps = MapsText();
    gprof_process_maps record{};
    record.pid = kPid;
    record.text_len = static_cast<uint32_t>(maps.size());
    record.time_ns = kStartNs + 100 * kUs;
    kernel_.Add(record, GPROF_REC_PROCESS_MAPS, maps);
  }

  void Call(uint32_t tid, uint32_t api, uint64_t enter, uint64_t exit) {
    format::ApiCallRecord record{};
    record.enter_ns = enter;
    record.exit_ns = exit;
    record.tid = tid;
    record.api_id = api;
    if (api == kLaunch || api == kMemcpyAsync || api == kEventRecord) {
      record.stream = 0x5600000 + (tid - kPid) * 0x100;
      record.flags = format::kApiCallHasStream;
    }
    inject_.Add(record, format::kApiCall);
  }

  // A futex call: a wake, a wait for an event (FUTEX_WAIT_BITSET, as a condition variable) or a
  // wait for a contended lock (FUTEX_WAIT on the value 2, as a glibc mutex).
  enum class FutexKind { kWake, kWaitEvent, kWaitLock };
  void Futex(uint32_t tid, uint64_t start, uint64_t end, uint64_t uaddr, FutexKind kind) {
    bool wait = kind != FutexKind::kWake;
    gprof_futex record{};
    record.pid = kPid;
    record.tid = tid;
    record.start_ns = start;
    record.end_ns = end;
    record.uaddr = uaddr;
    record.op = kind == FutexKind::kWake        ? kFutexWakePrivate
                : kind == FutexKind::kWaitEvent ? kFutexWaitBitsetPrivate
                                                : kFutexWaitPrivate;
    record.val = wait ? 2 : 1;
    record.val3 = kind == FutexKind::kWaitEvent ? 0xffffffffu : 0;
    record.timeout_ns = -1;
    record.ret = wait ? 0 : 1;
    kernel_.Add(record, GPROF_REC_FUTEX);
  }

  void OffCpu(uint32_t tid, uint64_t start, uint64_t end, uint64_t wake, uint32_t waker_tid,
              int32_t kstack, int32_t waker_kstack) {
    stacks_.Note(kstack, &kernel_);
    stacks_.Note(waker_kstack, &kernel_);
    gprof_offcpu record{};
    record.pid = kPid;
    record.tid = tid;
    record.start_ns = start;
    record.end_ns = end;
    record.wake_ns = wake;
    record.waker_pid = kPid;
    record.waker_tid = waker_tid;
    record.kstack_id = kstack;
    record.waker_kstack_id = waker_kstack;
    record.state = GPROF_TASK_INTERRUPTIBLE;
    record.cpu = tid % 16;
    record.user_stack_id = -ENODATA;
    record.waker_user_stack_id = -ENODATA;
    std::string comm = ThreadName(waker_tid - kPid);
    memcpy(record.waker_comm, comm.data(), std::min(comm.size(), sizeof(record.waker_comm) - 1));
    kernel_.Add(record, GPROF_REC_OFFCPU);
  }

  // One iteration of pair `pair` from `base`: 8 records (2 CUDA calls, 4 futex calls, 2 off-CPU
  // intervals), in the order they end. False, writing nothing, when they would pass the budget.
  bool Iteration(uint64_t iteration, uint32_t pair, uint64_t base, bool slow, uint64_t* span) {
    uint32_t even = Tid(2 * pair), odd = Tid(2 * pair + 1);
    uint64_t even_word = kHeapBase + pair * 0x80, odd_word = even_word + 0x40;
    uint64_t lock_word = kDriverData + 0x1c40 + pair * 0x40;
    uint64_t key = iteration * 64 + pair;
    int32_t even_stack = stacks_.WaitStack(2 * key), odd_stack = stacks_.WaitStack(2 * key + 1);
    int32_t even_waker_stack = stacks_.WakeStack(2 * key + 1);
    int32_t odd_waker_stack = stacks_.WakeStack(2 * key);
    uint64_t extra = stacks_.CostOfNoting(even_stack) + stacks_.CostOfNoting(odd_stack) +
                     stacks_.CostOfNoting(even_waker_stack) + stacks_.CostOfNoting(odd_waker_stack);
    if (written() + 8 + extra + stacks_.pending_symbols() > budget_) return false;

    // The even thread's wait on its word ends at `released`, when the odd thread wakes it.
    uint64_t wait_ns = slow ? 1'200 * kUs + (key * 7919 % 1'800) * kUs : 20 * kUs + key % 5 * 300;
    uint64_t released = base + 8 * kUs + wait_ns;
    uint32_t api = iteration % 3 == 0 ? kLaunch : iteration % 3 == 1 ? kMemcpyAsync : kEventRecord;
    // Even: a CUDA call; a slow one holds its whole futex wait (a launch blocked on a driver lock).
    uint64_t even_exit = slow ? released + 2 * kUs : base + 5 * kUs;
    // Odd: a CUDA call; in a slow iteration cudaFree, on-CPU until it releases the even thread.
    uint64_t odd_exit = slow ? released + 1 * kUs : base + 6 * kUs;
    if (slow) {
      slow_calls_ += 2;
      Futex(odd, released - 3 * kUs, released - 2 * kUs, lock_word, FutexKind::kWake);
      Futex(even, base + 8 * kUs, released, lock_word, FutexKind::kWaitLock);
      OffCpu(even, base + 9 * kUs, released, released - 2 * kUs, odd, even_stack, even_waker_stack);
      Call(odd, kFree, base + 1 * kUs, odd_exit);
      Call(even, api == kEventRecord ? kLaunch : api, base, even_exit);
    } else {
      Call(even, api, base, even_exit);
      Call(odd, api == kLaunch ? kEventRecord : kLaunch, base + 1 * kUs, odd_exit);
      Futex(odd, released - 3 * kUs, released - 2 * kUs, even_word, FutexKind::kWake);
      Futex(even, base + 8 * kUs, released, even_word, FutexKind::kWaitEvent);
      OffCpu(even, base + 9 * kUs, released, released - 2 * kUs, odd, even_stack, even_waker_stack);
    }
    // Then the odd thread waits on its word until the even thread wakes it.
    uint64_t odd_release = released + 18 * kUs;
    Futex(even, odd_release - 3 * kUs, odd_release - 2 * kUs, odd_word, FutexKind::kWake);
    Futex(odd, released + 3 * kUs, odd_release, odd_word, FutexKind::kWaitEvent);
    OffCpu(odd, released + 4 * kUs, odd_release, odd_release - 2 * kUs, even, odd_stack,
           odd_waker_stack);
    *span = odd_release + 2 * kUs - base;
    return true;
  }

  uint64_t budget_;
  uint32_t threads_;
  std::mt19937_64 random_;
  KernelStacks stacks_;
  StagedFile inject_, kernel_;
  uint64_t slow_calls_ = 0;
  uint64_t end_ns_ = 0;
};

bool WriteSessionJson(const std::string& dir, uint64_t end_ns) {
  // The fields and layout of cli/session_directory.cc's WriteSessionMeta.
  uint64_t realtime_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  nlohmann::json meta = {
      {"format", "gprof-run-session"},
      {"version", collector::kSessionMetaVersion},
      {"tool_version", "bench_session_gen"},
      {"command", {"python3", "train.py"}},
      {"root_pid", kPid},
      {"clock", "CLOCK_MONOTONIC"},
      {"start",
       {{"monotonic_ns", kStartNs}, {"realtime_ns", realtime_ns}, {"boottime_ns", kStartNs}}},
      {"end", {{"monotonic_ns", end_ns}}},
      {"exit", {{"code", 0}}},
      {"kernel_recording", {{"enabled", true}, {"note", ""}}},
      {"inject_library", "/opt/bench/lib/gprof-run/libgprof_inject.so"},
      {"cuda_mode", "auto"},
  };
  std::ofstream out(fs::path(dir) / collector::kSessionMetaFile, std::ios::trunc);
  out << meta.dump(2) << "\n";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a synthetic gprof-run session directory of EVENTS records"};
  std::string dir;
  uint64_t events = 0;
  uint32_t threads = 8;
  app.add_option("dir", dir, "Session directory to create (must not exist, or be empty)")
      ->required();
  app.add_option("events", events, "Records to write in all (both files)")->required();
  app.add_option("--threads", threads, "Threads of the process, in pairs (even, >= 2)");
  CLI11_PARSE(app, argc, argv);
  if (threads < 2 || threads % 2 != 0 || threads > 64) {
    fprintf(stderr, "bench_session_gen: --threads must be even, 2..64\n");
    return 2;
  }
  std::error_code error;
  if (fs::exists(dir, error) && !fs::is_empty(dir, error)) {
    fprintf(stderr, "bench_session_gen: %s exists and is not empty\n", dir.c_str());
    return 2;
  }
  fs::create_directories(dir, error);
  if (error) {
    fprintf(stderr, "bench_session_gen: cannot create %s: %s\n", dir.c_str(),
            error.message().c_str());
    return 1;
  }
  Generator generator(events, threads);
  if (!generator.Run(dir)) return 1;
  if (!WriteSessionJson(dir, generator.end_ns())) {
    fprintf(stderr, "bench_session_gen: cannot write %s/session.json\n", dir.c_str());
    return 1;
  }
  generator.PrintCounts(stdout);
  return 0;
}
