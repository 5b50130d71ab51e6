// The words of the text report: C++ names shortened (real names from the demo's and the H200's
// stacks), stacks folded with junk frames dropped, reasons in words, lines fitted to a width.
#include "collector/writers/words/lines.h"
#include "collector/writers/words/names.h"
#include "collector/writers/words/objects.h"
#include "collector/writers/words/sentences.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "collector/session/process_maps.h"
#include "collector/symbols/python_frames.h"

namespace gprof::test {
namespace {

using collector::FitLines;
using collector::FoldedFrameLines;
using collector::ReasonInWords;
using collector::ShortCppName;
using collector::ShortFrame;
using collector::StackFrame;

TEST(ReportWords, CppNamesLoseParametersClonesAndDeepTemplateArguments) {
  // The demo's freeze_app frame, ~600 characters with std::string's full name six times.
  const std::string ugly =
      "unsigned long (anonymous namespace)::CallTimer::Time<(anonymous namespace)::CreateStream("
      "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&, "
      "(anonymous namespace)::CallTimer&, CUstream_st**)::{lambda()#1}>(std::__cxx11::basic_"
      "string<char, std::char_traits<char>, std::allocator<char> > const&, char const*, "
      "(anonymous namespace)::CreateStream(std::__cxx11::basic_string<char, std::char_traits<char>"
      ", std::allocator<char> > const&, (anonymous namespace)::CallTimer&, CUstream_st**)::"
      "{lambda()#1}&&) [clone .constprop.0] [clone .isra.0]";
  EXPECT_EQ(ShortCppName(ugly), "{anon}::CallTimer::Time<{anon}::CreateStream::{lambda#1}>");
  EXPECT_EQ(ShortFrame(ugly + "+0x47"),
            "{anon}::CallTimer::Time<{anon}::CreateStream::{lambda#1}>+0x47");
  EXPECT_EQ(
      ShortCppName("std::thread::_State_impl<std::thread::_Invoker<std::tuple<main::{lambda()#1}"
                   "> > >::_M_run()"),
      "std::thread::_State_impl<std::thread::_Invoker<...> >::_M_run");
  EXPECT_EQ(ShortCppName("std::vector<std::__cxx11::basic_string<char, std::char_traits<char>, "
                         "std::allocator<char> >, std::allocator<std::__cxx11::basic_string<char, "
                         "std::char_traits<char>, std::allocator<char> > > >::push_back("
                         "std::__cxx11::basic_string<char, std::char_traits<char>, "
                         "std::allocator<char> > const&)"),
            "std::vector<std::string, std::allocator<...> >::push_back");
  EXPECT_EQ(ShortCppName("(anonymous namespace)::RunLauncher(int, std::atomic<bool> const&, "
                         "(anonymous namespace)::CallTimer&)"),
            "{anon}::RunLauncher");
  EXPECT_EQ(ShortCppName("at::native::(anonymous namespace)::Foo::operator()(at::Tensor const&) "
                         "const"),
            "at::native::{anon}::Foo::operator()");
  EXPECT_EQ(ShortCppName("std::ostream& std::operator<< <std::char_traits<char> >(std::ostream&, "
                         "char const*)"),
            "std::operator<< <std::char_traits<...> >");
  EXPECT_EQ(ShortCppName("operator new(unsigned long)"), "operator new");
  EXPECT_EQ(ShortCppName("c10::Device::str[abi:cxx11]() const"), "c10::Device::str");
  EXPECT_EQ(ShortCppName("fakeKernel(unsigned int)"), "fakeKernel");
  // Names that are no signatures stay as they are.
  EXPECT_EQ(ShortCppName("cudaLaunchKernel"), "cudaLaunchKernel");
  EXPECT_EQ(ShortFrame("libc.so.6+0x891f5"), "libc.so.6+0x891f5");
  EXPECT_EQ(ShortFrame("0x75622f72656d6f63"), "0x75622f72656d6f63");
  EXPECT_EQ(ShortCppName("vtable for std::thread"), "vtable for std::thread");
}

StackFrame Frame(std::string name, std::string module, bool program = false, bool junk = false) {
  StackFrame frame;
  frame.name = std::move(name);
  frame.module = std::move(module);
  frame.program = program;
  frame.junk = junk;
  return frame;
}

TEST(ReportWords, StacksFoldLibraryRunsAndDropJunkFrames) {
  std::vector<StackFrame> frames = {
      Frame("__futex_abstimed_wait_common+0xc6", "libc.so.6"),
      Frame("__lll_lock_wait+0x2b", "libc.so.6"),
      Frame("libc.so.6+0x891f5", "libc.so.6"),
      Frame("pthread_mutex_lock+0x10", "libc.so.6"),
      Frame("cudaLaunchKernel+0x94", "libcudart.so.13"),
      Frame("0x7865742d3132692f", "", false, /*junk=*/true),
      Frame("(anonymous namespace)::RunLauncher(int, std::atomic<bool> const&)+0x313", "app",
            /*program=*/true),
      Frame("libstdc++.so.6.0.30+0xd44a3", "libstdc++.so.6.0.30"),
      Frame("start_thread+0x305", "libc.so.6"),
      Frame("clone3+0x2c", "libc.so.6"),
  };
  frames[6].source = "app.cc:42";
  EXPECT_EQ(
      FoldedFrameLines(frames),
      (std::vector<std::string>{"... 3 frames in libc.so.6", "pthread_mutex_lock+0x10 in libc.so.6",
                                "cudaLaunchKernel+0x94 in libcudart.so.13",
                                "{anon}::RunLauncher+0x313  at app.cc:42",
                                "... 3 frames in libstdc++.so.6.0.30, libc.so.6"}));
  // Two frames of one library are shown as they are; a stack of the program alone is unchanged.
  EXPECT_EQ(FoldedFrameLines({Frame("a()+0x1", "liba.so"), Frame("b()+0x2", "liba.so"),
                              Frame("main+0x3", "app", true)}),
            (std::vector<std::string>{"a+0x1 in liba.so", "b+0x2 in liba.so", "main+0x3"}));
  // Recursion is said once.
  std::vector<StackFrame> deep(6, Frame("f(int)+0x1c", "app", true));
  EXPECT_EQ(FoldedFrameLines(deep),
            (std::vector<std::string>{"f+0x1c", "... f+0x1c repeated 5 more times"}));
}

__attribute__((noinline)) int ResolvedFunction(int x) { return x * 3 + 1; }

TEST(ReportWords, AFrameInNoCodeMappingIsJunkAndTheProgramsFramesAreTold) {
  std::ifstream in("/proc/self/maps");
  std::string maps((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto pid = static_cast<uint32_t>(getpid());
  collector::Session session;
  session.processes[pid].pid = pid;
  session.processes[pid].exe = std::filesystem::read_symlink("/proc/self/exe").string();
  session.processes[pid].maps = {{0, collector::ParseMaps(maps)}};
  int on_stack = 0;
  const std::vector<uint64_t> ips = {
      reinterpret_cast<uint64_t>(&ResolvedFunction) + 1,
      0x7865742d3132692f,                     // "/i21-tex": the text of a path
      reinterpret_cast<uint64_t>(&on_stack),  // a stack address: mapped, but no code
      reinterpret_cast<uint64_t>(&ResolvedFunction) + 2};
  auto frames = collector::ResolveStack(session, pid, ips, nullptr, collector::kLatest);
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_FALSE(frames[0].junk);
  EXPECT_TRUE(frames[0].program) << frames[0].module;
  EXPECT_TRUE(frames[1].junk);
  EXPECT_TRUE(frames[2].junk);
  EXPECT_FALSE(frames[3].junk);
  auto lines = FoldedFrameLines(frames);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0].starts_with("gprof::test::{anon}::ResolvedFunction+0x1")) << lines[0];
  // Without maps (the process was not seen), a frame is taken as it is.
  session.processes[pid].maps.clear();
  frames = collector::ResolveStack(session, pid, ips, nullptr, collector::kLatest);
  EXPECT_FALSE(frames[1].junk);
}

// One name a lock: a heap word the diagnosis found the CUDA driver waiting on is that library's
// lock wherever the text names it; without the diagnosis's word for it, its address and memory.
TEST(ReportWords, AHeapLockIsNamedByTheLibraryThatWaitedOnIt) {
  const uint32_t pid = 7;
  collector::Session session;
  session.processes[pid].pid = pid;
  session.processes[pid].maps = {
      {0, {collector::Mapping{0x1000000, 0x2000000, 0, "rw-p", "[heap]", 0}}}};
  collector::WaitObject lock;
  lock.kind = collector::WaitKind::kFutex;
  lock.pid = pid;
  lock.address = 0x1000040;
  EXPECT_EQ(ObjectWords(session, lock), "futex 0x1000040 on the heap");
  collector::LockUsers users = {{{pid, 0x1000040}, {"libcuda.so.580.159.04"}}};
  EXPECT_EQ(ObjectWords(session, lock, &users),
            "a lock inside libcuda.so.580.159.04 (futex 0x1000040 on the heap)");
  EXPECT_EQ(WaitWords(session, lock, collector::WaitClass::kUserLock, &users),
            "waiting for a lock inside libcuda.so.580.159.04 (futex 0x1000040 on the heap)");
  lock.address = 0x1000080;
  EXPECT_EQ(ObjectWords(session, lock, &users), "futex 0x1000080 on the heap") << "another word";
}

// A Python stack in the text: the program's frames first, then the library frames its innermost
// one called, one a line like every stack, outermost first.
TEST(ReportWords, PythonLibraryFramesAreOneALine) {
  auto frame = [](std::string file, int line, std::string function) {
    collector::PythonFrame f;
    f.named = true;
    f.file = std::move(file);
    f.line = line;
    f.function = std::move(function);
    return f;
  };
  const std::string torch = "/usr/lib/python3/dist-packages/torch/";
  collector::ResolvedPythonStack stack;
  stack.frames = {frame(torch + "cuda/memory.py", 224, "empty_cache"),
                  frame(torch + "cuda/__init__.py", 478, "_lazy_init"),
                  frame("/work/train.py", 42, "train_step"), frame("/work/train.py", 80, "main")};
  EXPECT_EQ(collector::PythonStackLines(stack, 8),
            (std::vector<std::string>{"/work/train.py:42 in train_step", "/work/train.py:80 in main",
                                      "inside torch/cuda/__init__.py:478 in _lazy_init",
                                      "       torch/cuda/memory.py:224 in empty_cache"}));
}

TEST(ReportWords, ReasonsAreWordsNotKernelFunctions) {
  EXPECT_EQ(ReasonInWords("do_nanosleep"), "asleep in nanosleep");
  EXPECT_EQ(ReasonInWords("hrtimer_nanosleep"), "asleep in nanosleep");
  EXPECT_EQ(ReasonInWords("anon_pipe_read"), "reading a pipe");
  EXPECT_EQ(ReasonInWords("pipe_write"), "writing a pipe");
  EXPECT_EQ(ReasonInWords("unix_stream_read_generic"), "reading a socket");
  EXPECT_EQ(ReasonInWords("do_epoll_wait"), "waiting in epoll_wait");
  EXPECT_EQ(ReasonInWords("do_wait"), "waiting for a child to exit");
  EXPECT_EQ(ReasonInWords("futex_do_wait"), "waiting on a futex");
  EXPECT_EQ(ReasonInWords("io_schedule"), "waiting for disk I/O");
  EXPECT_EQ(ReasonInWords("some_driver_function"), "");
}

TEST(ReportWords, LinesFitTheWidthBrokenAtPunctuation) {
  std::string line = "  first part, " + std::string(60, 'a') + "; " + std::string(60, 'b') + ", " +
                     std::string(60, 'c');
  std::string fitted = FitLines(line + "\nshort\n", 80);
  EXPECT_EQ(fitted, "  first part, " + std::string(60, 'a') + ";\n      " + std::string(60, 'b') +
                        ",\n      " + std::string(60, 'c') + "\nshort\n");
  // A word longer than the line is cut; UTF-8 counts as one column a character.
  std::string word(200, 'x');
  for (const std::string& text :
       {word, std::string(100, ' ') + word, "\"th\xc3\xa9" + std::string(170, 'e') + "\""}) {
    std::string out = FitLines(text + "\n", 80);
    size_t start = 0;
    for (size_t end = out.find('\n'); end != std::string::npos; end = out.find('\n', start)) {
      std::string_view got(out.data() + start, end - start);
      size_t columns = 0;
      for (char c : got) columns += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
      EXPECT_LE(columns, 80u) << got;
      start = end + 1;
    }
  }
}

}  // namespace
}  // namespace gprof::test
