// User-space symbolization against a real ELF file, this test binary, whose globals and functions
// have known names and addresses; and the fallbacks when the mapped file is missing, changed, or
// not an ELF file at all.
#include "user_symbols.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "analysis.h"
#include "elf_symbols.h"
#include "process_maps.h"
#include "report_format.h"
#include "test_support.h"

namespace gprof::test {

// Outside the anonymous namespace, so that their symbols are global: the names to find.
pthread_mutex_t g_symbolized_mutex = PTHREAD_MUTEX_INITIALIZER;  // all zero bytes: in .bss
int g_symbolized_words[4] = {1, 2, 3, 4};                        // in .data
volatile int g_symbolized_sink = 0;

__attribute__((noinline)) int SymbolizedFunction(int count) {
  for (int i = 0; i < count; ++i) g_symbolized_sink = g_symbolized_sink + i;
  return g_symbolized_sink;
}

namespace {

using collector::AddressUse;
using collector::DataText;
using collector::LocateUserAddress;
using collector::Mapping;
using collector::Session;

uint64_t AddressOf(const void* pointer) { return reinterpret_cast<uint64_t>(pointer); }

std::string ExecutablePath() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::string ExecutableName() { return std::filesystem::path(ExecutablePath()).filename(); }

const uint32_t kSelf = static_cast<uint32_t>(getpid());

// A session whose only process is this one, with its maps as the recorder would copy them.
Session SessionOfThisProcess() {
  std::ifstream in("/proc/self/maps");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Session session;
  session.processes[kSelf].pid = kSelf;
  session.processes[kSelf].maps = {{0, collector::ParseMaps(text)}};
  return session;
}

std::string DataAt(const Session& session, uint64_t address) {
  return DataText(
      LocateUserAddress(session, kSelf, address, collector::kLatest, AddressUse::kData));
}

TEST(UserSymbols, AGlobalMutexIsNamedByItsSymbol) {
  Session session = SessionOfThisProcess();
  EXPECT_EQ(DataAt(session, AddressOf(&g_symbolized_mutex)),
            ExecutableName() + ": gprof::test::g_symbolized_mutex");
}

TEST(UserSymbols, AnAddressInsideAVariableSaysHowFarIn) {
  Session session = SessionOfThisProcess();
  EXPECT_EQ(DataAt(session, AddressOf(&g_symbolized_words[2])),
            ExecutableName() + ": gprof::test::g_symbolized_words+0x8");
}

TEST(UserSymbols, StackFramesAreNamedByTheirFunctions) {
  Session session = SessionOfThisProcess();
  uint64_t function = AddressOf(reinterpret_cast<const void*>(&SymbolizedFunction));
  session.user_stacks[3] = {{function + 2, function + 1}, /*truncated=*/true};
  EXPECT_EQ(
      collector::UserStackFrames(session, kSelf, 3, collector::kLatest),
      (std::vector<std::string>{"gprof::test::SymbolizedFunction(int)+0x2",
                                "gprof::test::SymbolizedFunction(int)+0x1", "... (truncated)"}));
  EXPECT_TRUE(collector::UserStackFrames(session, kSelf, 4, collector::kLatest).empty());
  EXPECT_TRUE(collector::UserStackFrames(session, kSelf, -14, collector::kLatest).empty());
}

TEST(UserSymbols, AFutexWordOfTheProgramIsNamedInTheReport) {
  Session session = SessionOfThisProcess();
  collector::WaitObject object;
  object.kind = collector::WaitKind::kFutex;
  object.pid = kSelf;
  object.address = AddressOf(&g_symbolized_mutex);
  object.kernel_function = "futex_wait_queue";
  EXPECT_EQ(collector::DescribeWaitObject(session, object),
            "futex " + collector::FormatHex(object.address) + " (" + ExecutableName() +
                ": gprof::test::g_symbolized_mutex) in futex_wait_queue");
}

// The main program's load bias and the PT_LOAD segment that holds `address`.
struct LoadedSegment {
  uint64_t bias = 0;
  ElfW(Phdr) header{};
};

LoadedSegment SegmentOfMainProgram(uint64_t address) {
  struct Search {
    uint64_t address;
    LoadedSegment found;
    bool done = false;
  } search{address, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* search = static_cast<Search*>(data);
        if (search->done) return 1;
        search->done = true;  // the main program comes first
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& header = info->dlpi_phdr[i];
          uint64_t start = info->dlpi_addr + header.p_vaddr;
          if (header.p_type == PT_LOAD && search->address >= start &&
              search->address < start + header.p_memsz) {
            search->found = LoadedSegment{info->dlpi_addr, header};
          }
        }
        return 1;
      },
      &search);
  return search.found;
}

TEST(UserSymbols, AStrippedLibraryIsNamedByItsExportedSymbols) {
  // libc keeps no .symtab: its functions are named from .dynsym, of aliases the public name.
  Session session = SessionOfThisProcess();
  uint64_t lock = AddressOf(reinterpret_cast<const void*>(&pthread_mutex_lock));
  collector::UserLocation location =
      LocateUserAddress(session, kSelf, lock + 4, collector::kLatest, AddressUse::kReturnAddress);
  EXPECT_EQ(collector::FrameText(location, lock + 4), "pthread_mutex_lock+0x4");
  EXPECT_TRUE(location.module.starts_with("libc.so")) << location.module;
}

TEST(UserSymbols, AGlobalInTheAnonymousMemoryAfterItsModuleIsNamedByIt) {
  // The zero-filled end of a module's data segment (.bss) past its last file page is anonymous
  // memory right after the module's file mapping. Laid out so here: the file mapping ends, and the
  // anonymous mapping begins, at the mutex.
  uint64_t mutex = AddressOf(&g_symbolized_mutex);
  LoadedSegment segment = SegmentOfMainProgram(mutex);
  ASSERT_EQ(segment.header.p_type, static_cast<uint32_t>(PT_LOAD));
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t segment_start = segment.bias + (segment.header.p_vaddr & ~(page - 1));
  uint64_t segment_end = segment.bias + segment.header.p_vaddr + segment.header.p_memsz;
  ASSERT_LT(segment_start, mutex);
  struct stat info {};
  ASSERT_EQ(stat(ExecutablePath().c_str(), &info), 0);
  Mapping data{segment_start,    mutex,      segment.header.p_offset & ~(page - 1), "rw-p",
               ExecutablePath(), info.st_ino};
  Mapping bss{mutex, segment_end, 0, "rw-p", "", 0};
  Session session;
  session.processes[kSelf].maps = {{0, {data, bss}}};
  EXPECT_EQ(DataAt(session, mutex), ExecutableName() + ": gprof::test::g_symbolized_mutex");

  // Not right after the module: anonymous memory, nothing more.
  session.processes[kSelf].maps[0].mappings[1].start = mutex - 1;
  session.processes[kSelf].maps[0].mappings[0].end = mutex - 2;
  EXPECT_EQ(DataAt(session, mutex), "anonymous memory");
}

TEST(UserSymbols, AMissingFileLeavesTheModuleAndOffset) {
  Session session;
  session.processes[kSelf].maps = {
      {0,
       {Mapping{0x7f0000000000, 0x7f0000100000, 0x2000, "r-xp", "/nonexistent/libgone.so", 9},
        Mapping{0x7f0000200000, 0x7f0000201000, 0, "rw-p", "[heap]", 0},
        Mapping{0x7f0000300000, 0x7f0000301000, 0, "rw-p", "", 0}}}};
  EXPECT_EQ(DataAt(session, 0x7f0000000010), "libgone.so+0x2010");
  EXPECT_EQ(DataAt(session, 0x7f0000200010), "[heap]");
  EXPECT_EQ(DataAt(session, 0x7f0000300010), "anonymous memory");
  EXPECT_EQ(DataAt(session, 0x7f0000400000), "") << "in no mapping";
  session.user_stacks[1] = {{0x7f0000000010, 0x7f0000200010}, false};
  EXPECT_EQ(collector::UserStackFrames(session, kSelf, 1, collector::kLatest),
            (std::vector<std::string>{"libgone.so+0x2010", "0x7f0000200010"}));
}

TEST(UserSymbols, AFileReplacedSinceTheRecordingLeavesTheModuleAndOffset) {
  Session session = SessionOfThisProcess();
  for (Mapping& mapping : session.processes[kSelf].maps[0].mappings) {
    if (mapping.path == ExecutablePath()) ++mapping.inode;  // another file by that name now
  }
  std::string text = DataAt(session, AddressOf(&g_symbolized_words[0]));
  EXPECT_TRUE(text.starts_with(ExecutableName() + "+0x")) << text;
}

TEST(UserSymbols, AddressesAreNamedByTheMapsOfTheirTime) {
  Session session = SessionOfThisProcess();
  // Before an exec at time 100, the same address belonged to another program.
  session.processes[kSelf].maps[0].time_ns = 101;
  session.processes[kSelf].maps.insert(
      session.processes[kSelf].maps.begin(),
      {10, {Mapping{0, ~uint64_t{0}, 0, "r-xp", "/nonexistent/sh", 0}}});
  session.processes[kSelf].exec_ns = {100};
  uint64_t word = AddressOf(&g_symbolized_words[0]);
  EXPECT_EQ(DataText(LocateUserAddress(session, kSelf, word, 50, AddressUse::kData)),
            "sh+" + collector::FormatHex(word));
  EXPECT_EQ(DataText(LocateUserAddress(session, kSelf, word, 150, AddressUse::kData)),
            ExecutableName() + ": gprof::test::g_symbolized_words");
  // Between the exec and the snapshot after it: the program's snapshot, never the shell's.
  EXPECT_EQ(DataText(LocateUserAddress(session, kSelf, word, 100, AddressUse::kData)),
            ExecutableName() + ": gprof::test::g_symbolized_words");
}

TEST(ElfSymbols, OnlyRegularElfFilesAreRead) {
  TempDir dir;
  std::string text_file = dir.Sub("not-elf.so");
  std::ofstream(text_file) << "hello";
  EXPECT_FALSE(collector::ElfSymbolFile::Read(text_file).ok());
  EXPECT_FALSE(collector::ElfSymbolFile::Read(dir.Sub("missing.so")).ok());
  collector::ElfSymbolCache cache;
  EXPECT_EQ(cache.Find("/dev/null", 0), nullptr) << "a device file is never opened";
  EXPECT_EQ(cache.Find("relative/libfoo.so", 0), nullptr);
  EXPECT_EQ(cache.Find(text_file, 0), nullptr);
  const collector::ElfSymbolFile* self = cache.Find(ExecutablePath(), 0);
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(cache.Find(ExecutablePath(), 0), self) << "read once";
  EXPECT_FALSE(self->segments().empty());
}

}  // namespace
}  // namespace gprof::test
