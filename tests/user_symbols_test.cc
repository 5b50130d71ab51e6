// User-space symbolization against a real ELF file, this test binary, whose globals and functions
// have known names and addresses; and the fallbacks when the mapped file is missing, changed, or
// not an ELF file at all. Separate debug files, the call before a return address, and a lock
// named by the code that waited on it; repeated frames shown once.
#include "collector/symbols/user_symbols.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "collector/analysis/analysis.h"
#include "collector/model/elf_symbols.h"
#include "collector/session/process_maps.h"
#include "collector/writers/words/lines.h"
#include "collector/writers/words/objects.h"
#include "tests/test_support.h"

namespace gprof::test {

// Outside the anonymous namespace, so that their symbols are global: the names to find.
pthread_mutex_t g_symbolized_mutex = PTHREAD_MUTEX_INITIALIZER;  // all zero bytes: in .bss
int g_symbolized_words[4] = {1, 2, 3, 4};                        // in .data
volatile int g_symbolized_sink = 0;

__attribute__((noinline)) int SymbolizedFunction(int count) {
  for (int i = 0; i < count; ++i) g_symbolized_sink = g_symbolized_sink + i;
  return g_symbolized_sink;
}

// Where CallingFunction's call to CalledFunction returns to.
__attribute__((noinline)) uint64_t CalledFunction() {
  return reinterpret_cast<uint64_t>(__builtin_return_address(0));
}
__attribute__((noinline)) uint64_t CallingFunction() {
  uint64_t back = CalledFunction();
  g_symbolized_sink = g_symbolized_sink + 1;  // not a tail call
  return back;
}

// Where LineCaller calls LineCalled: the source line its return address must be named by.
__attribute__((noinline)) uint64_t LineCalled() {
  return reinterpret_cast<uint64_t>(__builtin_return_address(0));
}
constexpr int kLineOfTheCall = __LINE__ + 2;
__attribute__((noinline)) uint64_t LineCaller() {
  uint64_t back = LineCalled();
  g_symbolized_sink = g_symbolized_sink + 1;  // not a tail call
  return back;
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

// libc.so.6 as this process maps it.
std::string LibcPath() {
  Session session = SessionOfThisProcess();
  for (const Mapping& mapping : session.processes[kSelf].maps[0].mappings) {
    if (mapping.path.ends_with("/libc.so.6")) return mapping.path;
  }
  return {};
}

TEST(ElfSymbols, AStrippedLibrarysLocalVariableIsNamedFromItsDebugFile) {
  // libc keeps only exported symbols; stdout's lock is a local one, in the .bss past its file
  // pages, named by libc6-dbg's debug file (found by build-id).
  auto libc = collector::ElfSymbolFile::Read(LibcPath());
  ASSERT_TRUE(libc.ok());
  if (libc.value().debug_file().empty())
    GTEST_SKIP() << "no debug file for " << LibcPath() << " (scripts/setup.sh installs libc6-dbg)";
  EXPECT_TRUE(libc.value().debug_file().starts_with("/usr/lib/debug/.build-id/"))
      << libc.value().debug_file();
  Session session = SessionOfThisProcess();
  EXPECT_EQ(DataAt(session, AddressOf(stdout->_lock)), "libc.so.6: _IO_stdfile_1_lock");
}

TEST(ElfSymbols, WithoutItsDebugFileABssVariableIsNamedByItsSection) {
  Session session = SessionOfThisProcess();
  session.elf_symbols = collector::ElfSymbolCache("/nonexistent/debug");
  std::string text = DataAt(session, AddressOf(stdout->_lock));
  EXPECT_TRUE(text.starts_with("libc.so.6: .bss+0x")) << text;
}

// Runs `argv`; false with its output when it fails.
::testing::AssertionResult RunTool(const std::vector<std::string>& argv) {
  ProcessSpec spec;
  spec.argv = argv;
  ProcessResult result = RunProcess(spec);
  if (result.exit_code() == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << argv[0] << ": " << result.out << result.err;
}

// The build-id of `path` in hex, as readelf prints it.
std::string BuildIdOf(const std::string& path) {
  ProcessSpec spec;
  spec.argv = {"/usr/bin/readelf", "-n", path};
  std::string out = RunProcess(spec).out;
  size_t at = out.find("Build ID: ");
  if (at == std::string::npos) return {};
  at += 10;
  return out.substr(at, out.find('\n', at) - at);
}

TEST(ElfSymbols, ADebugFileIsFoundByBuildIdOrDebugLinkAndMustBeThatBuilds) {
  // libheaplock.so keeps its .symtab: stripped copies of it must find its static mutex again.
  const std::string library = AppPath("libheaplock.so");
  auto whole = collector::ElfSymbolFile::Read(library);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole.value().debug_file().empty()) << "a file with .symtab is read alone";
  uint64_t mutex = 0;
  for (const collector::ElfLoadSegment& segment : whole.value().segments()) {
    for (uint64_t address = segment.address; address < segment.address + segment.memory_size;
         address += 8) {
      const collector::ElfSymbol* object = whole.value().ObjectAt(address);
      if (object != nullptr && object->name.find("g_heaplock_static_mutex") != std::string::npos)
        mutex = object->address;
      if (mutex != 0) break;
    }
  }
  ASSERT_NE(mutex, 0u);
  auto named = [&](const std::string& path, const std::string& root, std::string* debug_file) {
    auto file = collector::ElfSymbolFile::Read(path, root);
    if (!file.ok()) return false;
    *debug_file = file.value().debug_file();
    const collector::ElfSymbol* object = file.value().ObjectAt(mutex);
    return object != nullptr && object->name.find("g_heaplock_static_mutex") != std::string::npos;
  };
  TempDir dir;
  std::string debug_file;
  const std::string stripped = dir.Sub("libheaplock.so");
  ASSERT_TRUE(RunTool({"/usr/bin/objcopy", "--strip-all", library, stripped}));
  EXPECT_FALSE(named(stripped, dir.Sub("root"), &debug_file)) << "stripped, nothing beside it";

  // By build-id, under the debug root.
  const std::string id = BuildIdOf(library);
  ASSERT_GT(id.size(), 2u);
  const std::string by_id = dir.Sub("root/.build-id/" + id.substr(0, 2));
  std::filesystem::create_directories(by_id);
  ASSERT_TRUE(RunTool(
      {"/usr/bin/objcopy", "--only-keep-debug", library, by_id + "/" + id.substr(2) + ".debug"}));
  EXPECT_TRUE(named(stripped, dir.Sub("root"), &debug_file));
  EXPECT_EQ(debug_file, by_id + "/" + id.substr(2) + ".debug");

  // By debug link, in the .debug directory beside the file.
  std::filesystem::create_directories(dir.Sub("linked/.debug"));
  const std::string linked = dir.Sub("linked/libheaplock.so");
  ASSERT_TRUE(RunTool(
      {"/usr/bin/objcopy", "--only-keep-debug", library, dir.Sub("linked/.debug/heaplock.dbg")}));
  ASSERT_TRUE(
      RunTool({"/usr/bin/objcopy", "--strip-all",
               "--add-gnu-debuglink=" + dir.Sub("linked/.debug/heaplock.dbg"), library, linked}));
  EXPECT_TRUE(named(linked, dir.Sub("no-root"), &debug_file));
  EXPECT_EQ(debug_file, dir.Sub("linked/.debug/heaplock.dbg"));

  // Another build's debug file by that name is not this file's.
  ASSERT_TRUE(RunTool({"/usr/bin/objcopy", "--only-keep-debug", AppPath("libheapwrap.so"),
                       dir.Sub("linked/.debug/heaplock.dbg")}));
  EXPECT_FALSE(named(linked, dir.Sub("no-root"), &debug_file));
  EXPECT_TRUE(debug_file.empty()) << debug_file;
}

TEST(ElfSymbols, FramesAreNamedWithTheirSourceLineFromDwarf) {
  // This binary is built with -g (tests/CMakeLists.txt): the call's own line.
  Session session = SessionOfThisProcess();
  collector::UserLocation call = LocateUserAddress(session, kSelf, LineCaller(), collector::kLatest,
                                                   AddressUse::kReturnAddress);
  EXPECT_EQ(call.source, "user_symbols_test.cc:" + std::to_string(kLineOfTheCall));
  EXPECT_EQ(call.symbol, "gprof::test::LineCaller()");

  // A library's lines: from itself, from its debug file found by build-id or by debug link, and
  // none when it is stripped with no debug file to be found.
  const std::string library = AppPath("libheaplock.so");
  auto whole = collector::ElfSymbolFile::Read(library);
  ASSERT_TRUE(whole.ok());
  uint64_t function = 0;
  std::string line;
  for (const collector::ElfLoadSegment& segment : whole.value().segments()) {
    if ((segment.flags & PF_X) == 0) continue;
    for (uint64_t address = segment.address; address < segment.address + segment.file_size;
         address += 4) {
      const collector::ElfSymbol* symbol = whole.value().FunctionAt(address);
      if (symbol == nullptr || symbol->name.find("heaplock") == std::string::npos) continue;
      line = whole.value().SourceLine(address);
      if (!line.empty()) {
        function = address;
        break;
      }
    }
    if (function != 0) break;
  }
  ASSERT_NE(function, 0u) << "no line of libheaplock.so's own code";
  EXPECT_TRUE(line.starts_with("heaplock.cc:")) << line;
  auto line_in = [&](const std::string& path, const std::string& root) {
    auto file = collector::ElfSymbolFile::Read(path, root);
    return file.ok() ? file.value().SourceLine(function) : "unreadable";
  };
  TempDir dir;
  const std::string stripped = dir.Sub("libheaplock.so");
  ASSERT_TRUE(RunTool({"/usr/bin/objcopy", "--strip-all", library, stripped}));
  EXPECT_EQ(line_in(stripped, dir.Sub("root")), "") << "stripped, nothing beside it";
  const std::string id = BuildIdOf(library);
  ASSERT_GT(id.size(), 2u);
  const std::string by_id = dir.Sub("root/.build-id/" + id.substr(0, 2));
  std::filesystem::create_directories(by_id);
  ASSERT_TRUE(RunTool(
      {"/usr/bin/objcopy", "--only-keep-debug", library, by_id + "/" + id.substr(2) + ".debug"}));
  EXPECT_EQ(line_in(stripped, dir.Sub("root")), line);
  std::filesystem::create_directories(dir.Sub("linked/.debug"));
  const std::string linked = dir.Sub("linked/libheaplock.so");
  ASSERT_TRUE(RunTool(
      {"/usr/bin/objcopy", "--only-keep-debug", library, dir.Sub("linked/.debug/heaplock.dbg")}));
  ASSERT_TRUE(
      RunTool({"/usr/bin/objcopy", "--strip-all",
               "--add-gnu-debuglink=" + dir.Sub("linked/.debug/heaplock.dbg"), library, linked}));
  EXPECT_EQ(line_in(linked, dir.Sub("no-root")), line);
}

TEST(ElfSymbols, TheCallBeforeAReturnAddressNamesTheFunctionCalled) {
  uint64_t back = CallingFunction();
  LoadedSegment segment = SegmentOfMainProgram(back);
  ASSERT_EQ(segment.header.p_type, static_cast<uint32_t>(PT_LOAD));
  auto self = collector::ElfSymbolFile::Read(ExecutablePath());
  ASSERT_TRUE(self.ok());
  collector::ElfSymbolFile::CallTarget target = self.value().CallBefore(back - segment.bias);
  EXPECT_EQ(target.address + segment.bias,
            AddressOf(reinterpret_cast<const void*>(&CalledFunction)));
  EXPECT_TRUE(target.import.empty());
  // Not a return address: the bytes before a function's first byte are no call to tell.
  uint64_t function = AddressOf(reinterpret_cast<const void*>(&SymbolizedFunction));
  EXPECT_EQ(self.value().CallBefore(function - segment.bias).address, 0u);
  const collector::ElfSymbol* named =
      self.value().FunctionNamed("_ZN5gprof4test14CalledFunctionEv");
  ASSERT_NE(named, nullptr);
  EXPECT_EQ(named->address + segment.bias,
            AddressOf(reinterpret_cast<const void*>(&CalledFunction)));
  EXPECT_EQ(self.value().FunctionNamed("no_such_function"), nullptr);
}

TEST(ElfSymbols, CodeBuiltWithFramePointersIsTold) {
  auto with = collector::ElfSymbolFile::Read(AppPath("libheaplock.so"));  // -fno-omit-frame-pointer
  auto without = collector::ElfSymbolFile::Read(ExecutablePath());        // -O2: none
  ASSERT_TRUE(with.ok());
  ASSERT_TRUE(without.ok());
  EXPECT_TRUE(with.value().KeepsFramePointers());
  EXPECT_FALSE(without.value().KeepsFramePointers());
}

// A session whose process maps libraries that are not on this machine (named by mapping alone),
// a heap, anonymous memory and a JIT's code.
Session SessionWithLibraries() {
  Session session;
  session.processes[kSelf].pid = kSelf;
  session.processes[kSelf].maps = {
      {0,
       {Mapping{0x7f0000000000, 0x7f0000100000, 0, "r-xp", "/nonexistent/libc.so.6", 1},
        Mapping{0x7f0000100000, 0x7f0000200000, 0, "r-xp", "/nonexistent/libstdc++.so.6.0.30", 2},
        Mapping{0x7f0000200000, 0x7f0000300000, 0, "r-xp", "/nonexistent/libfoo.so", 3},
        Mapping{0x7f0000300000, 0x7f0000400000, 0, "r-xp", "/nonexistent/libbar.so", 4},
        Mapping{0x7f0000400000, 0x7f0000500000, 0, "r-xp", "", 0},
        Mapping{0x7f0000500000, 0x7f0000600000, 0, "rw-p", "", 0},
        Mapping{0x7f0000600000, 0x7f0000700000, 0, "rw-p", "[heap]", 0}}}};
  return session;
}

TEST(UserSymbols, ALockIsNamedByTheFirstFrameOutsideTheSystemLibraries) {
  EXPECT_TRUE(collector::IsSystemLibrary("libc.so.6"));
  EXPECT_TRUE(collector::IsSystemLibrary("libpthread.so.0"));
  EXPECT_TRUE(collector::IsSystemLibrary("ld-linux-x86-64.so.2"));
  EXPECT_TRUE(collector::IsSystemLibrary("libstdc++.so.6.0.30"));
  EXPECT_TRUE(collector::IsSystemLibrary("libgcc_s.so.1"));
  EXPECT_FALSE(collector::IsSystemLibrary("libcuda.so.580.159.04"));
  EXPECT_FALSE(collector::IsSystemLibrary("libcudart.so.13"));
  Session session = SessionWithLibraries();
  auto user = [&](std::vector<uint64_t> ips) -> std::string {
    session.user_stacks[1] = {std::move(ips), false};
    auto found = collector::FindLockUser(session, kSelf, 1, collector::kLatest);
    return found ? found->module + "|" + found->function : "none";
  };
  // libc, a libstdc++ wrapper, then the library that took the lock, then its caller.
  EXPECT_EQ(user({0x7f0000000010, 0x7f0000100020, 0x7f0000200030, 0x7f0000300040}), "libfoo.so|");
  // A JIT's frame is passed; a frame in data means the walk left the real frames.
  EXPECT_EQ(user({0x7f0000000010, 0x7f0000400010, 0x7f0000300040}), "libbar.so|");
  EXPECT_EQ(user({0x7f0000000010, 0x7f0000500010, 0x7f0000300040}), "none");
  EXPECT_EQ(user({0x7f0000000010, 0x7f0000100020}), "none") << "only the system's code";
  EXPECT_EQ(user({0x7f0000200030}), "libfoo.so|") << "its own futex call";
}

// The code of `path`, mapped at `base` as its executable segment says.
Mapping CodeOf(const std::string& path, uint64_t base) {
  auto file = collector::ElfSymbolFile::Read(path);
  if (!file.ok()) {
    ADD_FAILURE() << path << ": " << file.status().message();
    return {};
  }
  for (const collector::ElfLoadSegment& segment : file.value().segments()) {
    if ((segment.flags & PF_X) == 0) continue;
    uint64_t start = base + (segment.address & ~0xfffull);
    return Mapping{start, base + segment.address + segment.memory_size,
                   segment.file_offset & ~0xfffull, "r-xp", path, 0};
  }
  ADD_FAILURE() << path << " has no code";
  return {};
}

// glibc keeps no frame pointer: the walk goes from its lock wait to the caller of the library
// function that called it, and the call before that return address names the function skipped,
// an import of another library. A wait at a program's start can fall in the maps snapshot read
// before its libraries were mapped (the next one comes 20 ms on, later on a loaded machine): the
// next snapshot of the same program says which library defines the import.
TEST(UserSymbols, ASkippedImportIsNamedByTheLibraryTheNextSnapshotShows) {
  const std::string wrap = AppPath("libheapwrap.so");
  auto wrap_file = collector::ElfSymbolFile::Read(wrap);
  ASSERT_TRUE(wrap_file.ok());
  // The return address of heapwrap_hold's call to heaplock_hold (an import: through the PLT).
  const collector::ElfSymbol* caller = wrap_file.value().FunctionNamed("heapwrap_hold");
  ASSERT_NE(caller, nullptr);
  uint64_t back = 0;
  for (uint64_t at = caller->address + 1; at <= caller->address + caller->size && !back; ++at) {
    if (wrap_file.value().CallBefore(at).import == "heaplock_hold") back = at;
  }
  ASSERT_NE(back, 0u);
  const std::string libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  auto libc_file = collector::ElfSymbolFile::Read(libc);
  ASSERT_TRUE(libc_file.ok());
  ASSERT_FALSE(libc_file.value().KeepsFramePointers()) << "the case this test is about";

  Session session;
  collector::Process& process = session.processes[kSelf];
  process.pid = kSelf;
  const Mapping system = CodeOf(libc, 0x7f0000000000);
  const Mapping wrapper = CodeOf(wrap, 0x7f1000000000);
  const Mapping definer = CodeOf(AppPath("libheaplock.so"), 0x7f2000000000);
  process.maps = {{100, {system, wrapper}}, {200, {system, wrapper, definer}}};
  session.user_stacks[1] = {{system.start + 0x10, 0x7f1000000000 + back}, false};
  auto user = [&] {
    auto found = collector::FindLockUser(session, kSelf, 1, 150);
    return found ? found->module + "|" + found->function : "none";
  };
  EXPECT_EQ(user(), "libheaplock.so|heaplock_hold");
  // Another program's snapshot (after an exec) says nothing of this one's libraries: the lock is
  // the caller's, the function that the return address is in.
  process.exec_ns = {180};
  EXPECT_EQ(user(), "libheapwrap.so|heapwrap_hold");
}

TEST(UserSymbols, ALockOnTheHeapIsNamedByTheCodeThatWaitedOnIt) {
  Session session = SessionWithLibraries();
  session.user_stacks[1] = {{0x7f0000000010, 0x7f0000200030, 0x7f0000300040}, false};
  session.api_names = {"cuLaunchKernel"};
  collector::ApiCall call;
  call.name_index = 0;
  collector::Wait wait;
  wait.pid = kSelf;
  wait.user_stack_id = 1;
  wait.object.kind = collector::WaitKind::kFutex;
  wait.object.pid = kSelf;
  wait.object.address = 0x7f0000600040;
  EXPECT_EQ(collector::DescribeLockByItsUser(session, wait, nullptr),
            "a lock inside libfoo.so (futex 0x7f0000600040 on the heap)");
  EXPECT_EQ(collector::DescribeLockByItsUser(session, wait, &call),
            "a lock inside libfoo.so (futex 0x7f0000600040 on the heap), waited for in "
            "cuLaunchKernel");
  wait.object.address = 0x7f0000500040;
  EXPECT_EQ(collector::DescribeLockByItsUser(session, wait, nullptr),
            "a lock inside libfoo.so (futex 0x7f0000500040 in anonymous memory)");
  wait.object.address = 0x7f0000200040;
  EXPECT_EQ(collector::DescribeLockByItsUser(session, wait, nullptr), "")
      << "a word in a module's own memory is named by it";
  wait.object.address = 0x7f0000600040;
  wait.user_stack_id = 2;
  EXPECT_EQ(collector::DescribeLockByItsUser(session, wait, nullptr), "") << "no stack";

  // The library's first named frame is where it waited: this program's, named by its symbols.
  Session own = SessionOfThisProcess();
  std::vector<Mapping>& mappings = own.processes[kSelf].maps[0].mappings;
  mappings.insert(mappings.begin(),
                  Mapping{0x1000, 0x2000, 0, "r-xp", "/nonexistent/libpthread.so.0", 5});
  uint64_t function = AddressOf(reinterpret_cast<const void*>(&SymbolizedFunction));
  own.user_stacks[1] = {{0x1010, function + 1}, false};
  uint64_t heap = 0;
  for (const Mapping& mapping : mappings) {
    if (mapping.path == "[heap]") heap = mapping.start + 16;
  }
  ASSERT_NE(heap, 0u) << "this process has a [heap] mapping";
  wait.user_stack_id = 1;
  wait.object.address = heap;
  EXPECT_EQ(collector::DescribeLockByItsUser(own, wait, &call),
            "a lock inside " + ExecutableName() + " (futex " + collector::FormatHex(heap) +
                " on the heap), waited for in gprof::test::SymbolizedFunction(int)");
}

// libc keeps no frame pointers: a walk through its lock skips the caller of pthread_mutex_lock.
// Where the call before the next return address cannot be read (an indirect call, as the CUDA
// driver's on the H200), the lock is still that frame's library's, not left unnamed.
TEST(UserSymbols, ALockCalledForThroughAnUnreadableCallIsNamedByTheNextLibrary) {
  Session own = SessionOfThisProcess();
  const Mapping* libc = nullptr;
  for (const Mapping& mapping : own.processes[kSelf].maps[0].mappings) {
    if (mapping.path.ends_with("/libc.so.6") && mapping.perms == "r-xp") libc = &mapping;
  }
  ASSERT_NE(libc, nullptr);
  auto libc_symbols = collector::ElfSymbolFile::Read(libc->path);
  ASSERT_TRUE(libc_symbols.ok());
  ASSERT_FALSE(libc_symbols.value().KeepsFramePointers()) << "the case needs a libc without them";
  uint64_t function = AddressOf(reinterpret_cast<const void*>(&SymbolizedFunction));
  // In libc's code, then a return address whose bytes before it are no call instruction.
  own.user_stacks[1] = {{libc->start + 0x100, function + 1}, false};
  uint64_t heap = 0;
  for (const Mapping& mapping : own.processes[kSelf].maps[0].mappings) {
    if (mapping.path == "[heap]") heap = mapping.start + 16;
  }
  ASSERT_NE(heap, 0u) << "this process has a [heap] mapping";
  collector::Wait wait;
  wait.pid = kSelf;
  wait.user_stack_id = 1;
  wait.object.kind = collector::WaitKind::kFutex;
  wait.object.pid = kSelf;
  wait.object.address = heap;
  own.api_names = {"cuLaunchKernel"};
  collector::ApiCall call;
  EXPECT_EQ(collector::DescribeLockByItsUser(own, wait, &call),
            "a lock inside " + ExecutableName() + " (futex " + collector::FormatHex(heap) +
                " on the heap), waited for in gprof::test::SymbolizedFunction(int)");
}

TEST(UserSymbols, AFrameRepeatedBackToBackIsShownOnceWithItsCount) {
  std::vector<std::string> frames = {"__lll_lock_wait+0x2b", "Leaf()+0x10"};
  for (int i = 0; i < 126; ++i) frames.push_back("Recurse(int)+0x48");
  frames.push_back("... (truncated)");
  std::vector<collector::FrameRepeat> repeats = collector::FindFrameRepeats(frames);
  ASSERT_EQ(repeats.size(), 1u);
  EXPECT_EQ(repeats[0].first, 2u);
  EXPECT_EQ(repeats[0].length, 1u);
  EXPECT_EQ(repeats[0].times, 126u);
  EXPECT_EQ(collector::CollapseFrameRepeats(frames),
            (std::vector<std::string>{"__lll_lock_wait+0x2b", "Leaf()+0x10", "Recurse(int)+0x48",
                                      "... Recurse(int)+0x48 repeated 125 more times",
                                      "... (truncated)"}));

  // A loop of three frames (a broken frame-pointer chain, or mutual recursion), then more.
  std::vector<std::string> loop = {"a"};
  for (int i = 0; i < 40; ++i) loop.insert(loop.end(), {"b", "c", "d"});
  loop.push_back("e");
  repeats = collector::FindFrameRepeats(loop);
  ASSERT_EQ(repeats.size(), 1u);
  EXPECT_EQ(repeats[0].first, 1u);
  EXPECT_EQ(repeats[0].length, 3u);
  EXPECT_EQ(repeats[0].times, 40u);
  EXPECT_EQ(collector::CollapseFrameRepeats(loop),
            (std::vector<std::string>{"a", "b", "c", "d",
                                      "... these 3 frames repeated 39 more times", "e"}));

  // Twice is no repetition worth folding; nothing else changes.
  std::vector<std::string> twice = {"a", "b", "b", "c"};
  EXPECT_TRUE(collector::FindFrameRepeats(twice).empty());
  EXPECT_EQ(collector::CollapseFrameRepeats(twice), twice);
}

}  // namespace
}  // namespace gprof::test
