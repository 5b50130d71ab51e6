// Issue 19: the user's own Python lines. Line tables decoded as each interpreter itself maps its
// instructions to lines; and gprof-run on tests/apps/py_frames.py, whose waits are written afresh
// each run (random names, random lines), read back from report.json, report.txt and the trace:
// the waiter's file, line and function, and the holder's, for a threading.Lock, the GIL, forked
// multiprocessing workers and a torch DataLoader. CI has Debian's /usr/bin/python3 (3.11) and
// python3-torch; the other CPythons (pyenv's, 3.9 to 3.13) are tested where they are installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "bpf/python_layouts.h"
#include "collector/symbols/python_lines.h"
#include "inject/format/kernel_events.h"
#include "tests/scenario_facts.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

using bpf::PythonObjectLayout;
using nlohmann::json;

const char kSystemPython[] = "/usr/bin/python3";

// The pyenv interpreters of this machine, by version (absent ones are left out).
std::vector<std::string> PyenvPythons() {
  std::vector<std::string> found;
  for (const char* version : {"3.9", "3.10", "3.11", "3.12", "3.13"}) {
    std::string pattern = std::string("/root/.pyenv/versions/") + version;
    // The newest micro release installed: versions/3.11.7/bin/python3.11
    ProcessResult ls = RunProcess(
        Command({"/bin/sh", "-c",
                 "ls -d " + pattern + ".*/bin/python" + version + " 2>/dev/null | tail -1"}));
    std::string path = ls.out.substr(0, ls.out.find('\n'));
    if (!path.empty() && access(path.c_str(), X_OK) == 0) found.push_back(path);
  }
  return found;
}

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return bytes;
}

// Prints every code object of the standard library's threading module and of py_frames.py:
// "code FORMAT FIRSTLINENO HEX" (its line table), then "at OFFSET LINE" for each instruction as
// the interpreter maps it (co_lines from 3.10; 3.9's dis.findlinestarts), "-" for no line.
const char kLineDumper[] = R"(
import dis, sys, threading, types
fmt = 1 if sys.version_info < (3, 10) else 2 if sys.version_info < (3, 11) else 3
def walk(code):
    table = code.co_lnotab if fmt == 1 else code.co_linetable
    print("code", fmt, code.co_firstlineno, table.hex() or "-")
    size = len(code.co_code)
    if fmt == 1:
        starts = list(dis.findlinestarts(code))
        for offset in range(0, size, 2):
            line = code.co_firstlineno
            for start, start_line in starts:
                if start <= offset:
                    line = start_line
            print("at", offset, line)
    else:
        for start, end, line in code.co_lines():
            for offset in range(start, end, 2):
                print("at", offset, "-" if line is None else line)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            walk(const)
for path in (threading.__file__, sys.argv[1]):
    with open(path) as source:
        walk(compile(source.read(), path, "exec"))
)";

void CheckLineTables(const std::string& python) {
  SCOPED_TRACE(python);
  ProcessResult run =
      RunProcess(Command({python, "-c", kLineDumper, SourceDir() + "/tests/apps/py_frames.py"}));
  ASSERT_EQ(run.exit_code(), 0) << run.err;
  std::istringstream lines(run.out);
  std::string kind;
  uint32_t format = 0;
  int32_t firstlineno = 0;
  std::vector<uint8_t> table;
  size_t codes = 0, checked = 0, without_line = 0;
  while (lines >> kind) {
    if (kind == "code") {
      std::string hex;
      lines >> format >> firstlineno >> hex;
      table = hex == "-" ? std::vector<uint8_t>{} : FromHex(hex);
      ++codes;
      continue;
    }
    int32_t offset = 0;
    std::string line;
    lines >> offset >> line;
    std::optional<int> got = collector::PythonLine(format, table, firstlineno, offset);
    std::optional<int> want;
    if (line != "-") want = std::stoi(line);
    without_line += !want.has_value();
    ++checked;
    ASSERT_EQ(got, want) << "offset " << offset << " of the code object at line " << firstlineno;
  }
  EXPECT_GE(codes, 100u);
  EXPECT_GE(checked, 2000u);
  (void)without_line;
}

TEST(PythonLines, AsTheSystemPythonMapsThem) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  CheckLineTables(kSystemPython);
}

TEST(PythonLines, AsEachInstalledPythonMapsThem) {
  std::vector<std::string> pythons = PyenvPythons();
  if (pythons.empty()) GTEST_SKIP() << "no pyenv CPython 3.9-3.13 in /root/.pyenv/versions";
  for (const std::string& python : pythons) CheckLineTables(python);
}

// ---------------------------------------------------------------------------------------------
// The hand-written layouts of 3.9 to 3.12 (and the dict internals of 3.13, which _Py_DebugOffsets
// leaves out) against each interpreter's own headers: tests/python/offsets_probe.c, compiled
// against them, prints the offsets.

std::map<std::string, long> ProbeOffsets(const std::string& include_dir, const TempDir& dir) {
  std::map<std::string, long> offsets;
  ProcessResult cc =
      RunProcess(Command({"/usr/bin/cc", "-I" + include_dir, "-I" + include_dir + "/internal", "-o",
                          dir.Sub("probe"), SourceDir() + "/tests/python/offsets_probe.c"}));
  EXPECT_EQ(cc.exit_code(), 0) << cc.err;
  if (cc.exit_code() != 0) return offsets;
  ProcessResult run = RunProcess(Command({dir.Sub("probe")}));
  std::istringstream lines(run.out);
  std::string name;
  long value = 0;
  while (lines >> name >> value) offsets[name] = value;
  return offsets;
}

void CheckLayouts(const std::string& include_dir) {
  SCOPED_TRACE(include_dir);
  TempDir dir;
  std::map<std::string, long> probe = ProbeOffsets(include_dir, dir);
  ASSERT_TRUE(probe.contains("version_hex"));
  const uint32_t version = static_cast<uint32_t>(probe["version_hex"]);
  auto expect = [&](const char* name, long table) {
    if (probe.contains(name)) {
      EXPECT_EQ(table, probe[name]) << name;
    }
  };
  const std::string code_name = probe.contains("code.qualname") ? "code.qualname" : "code.name";
  std::optional<PythonObjectLayout> l = bpf::TableObjectLayout(version);
  ASSERT_TRUE(l.has_value());
  expect(code_name.c_str(), l->code_name);
  expect("code.firstlineno", l->code_firstlineno);
  expect("code.filename", l->code_filename);
  expect("code.linetable", l->code_linetable);
  if (l->code_code != bpf::kPyNone) expect("code.code", l->code_code);
  expect("unicode.state", l->unicode_state);
  expect("unicode.length", l->unicode_length);
  expect("unicode.ascii_size", l->unicode_ascii_size);
  expect("unicode.compact_size", l->unicode_compact_size);
  expect("bytes.size", l->var_size);
  expect("bytes.sval", l->bytes_sval);
  expect("long.digit", l->long_digit);
  expect("dict.keys", l->dict_keys);
  expect("dict.values", l->dict_values);
  expect("keys.nentries", l->keys_nentries);
  expect("keys.indices", l->keys_indices);
  if (l->keys_size != bpf::kPyNone) expect("keys.size", l->keys_size);
  if (l->keys_log2_size != bpf::kPyNone) {
    expect("keys.log2_size", l->keys_log2_size);
    expect("keys.log2_index_bytes", l->keys_log2_index_bytes);
    expect("keys.kind", l->keys_kind);
    expect("values.values", l->values_values);
  }
  expect("type.flags", l->type_flags);
  expect("type.dictoffset", l->type_dictoffset);
  expect("type.basicsize", l->type_basicsize);
  expect("heaptype.cached_keys", l->heaptype_cached_keys);
  expect("module.dict", l->module_dict);
  expect("interp.modules", l->interp_modules);
  if ((version >> 16) >= 0x030d) return;  // the walker's offsets: the interpreter's own
  std::optional<gprof_python_offsets> o = bpf::TableOffsets(version);
  ASSERT_TRUE(o.has_value());
  expect("runtime.interpreters_head", o->runtime_interpreters_head);
  expect("interp.next", o->interp_next);
  expect("interp.threads_head", o->interp_threads_head);
  expect("tstate.next", o->tstate_next);
  expect("tstate.thread_id", o->tstate_thread_id);
  expect(probe.contains("tstate.cframe") ? "tstate.cframe" : "tstate.frame", o->tstate_frame);
  if (o->cframe_current_frame != bpf::kPyNone)
    expect("cframe.current_frame", o->cframe_current_frame);
  expect("frame.code", o->frame_code);
  expect("frame.previous", o->frame_previous);
  expect("frame.instr", o->frame_instr);
  if (o->frame_owner != bpf::kPyNone) expect("frame.owner", o->frame_owner);
  if (o->frame_is_entry != bpf::kPyNone) expect("frame.is_entry", o->frame_is_entry);
  expect(code_name.c_str(), o->code_name);
  expect("code.firstlineno", o->code_firstlineno);
  expect("code.filename", o->code_filename);
  if (probe.contains("code.code_adaptive")) expect("code.code_adaptive", o->code_adaptive);
}

TEST(PythonLayouts, AsTheSystemPythonsHeadersSayThem) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ProcessResult where = RunProcess(
      Command({kSystemPython, "-c", "import sysconfig; print(sysconfig.get_path('include'))"}));
  std::string include = where.out.substr(0, where.out.find('\n'));
  if (access((include + "/internal/pycore_frame.h").c_str(), R_OK) != 0)
    FAIL() << "CPython's internal headers are missing in " << include
           << " (libpython3-dev, scripts/setup.sh)";
  CheckLayouts(include);
}

TEST(PythonLayouts, AsEachInstalledPythonsHeadersSayThem) {
  std::vector<std::string> pythons = PyenvPythons();
  if (pythons.empty()) GTEST_SKIP() << "no pyenv CPython 3.9-3.13 in /root/.pyenv/versions";
  for (const std::string& python : pythons) {
    // .../versions/3.11.7/bin/python3.11 -> .../versions/3.11.7/include/python3.11
    std::string root = python.substr(0, python.rfind("/bin/"));
    CheckLayouts(root + "/include/" + python.substr(python.rfind('/') + 1));
  }
}

// 3.13's _Py_DebugOffsets that cannot be used: a free-threaded build's is one gprof-run does not
// read (the process's Python is then unsupported), others are invalid (no layout was found).
TEST(PythonLayouts, DebugOffsetsThatCannotBeUsedSayWhy) {
  std::vector<uint8_t> bytes(bpf::DebugOffsetsBytes());
  auto read = [&] { return bpf::ReadDebugOffsets(bytes, 0x030d00f0); };
  EXPECT_EQ(read().status().code(), StatusCode::kInvalid) << "no cookie";
  // The fields every _Py_DebugOffsets starts with: the cookie, the version, free-threaded or not.
  memcpy(bytes.data(), "xdebugpy", 8);
  uint64_t version = 0x030d00f0, free_threaded = 1;
  memcpy(bytes.data() + 8, &version, sizeof(version));
  memcpy(bytes.data() + 16, &free_threaded, sizeof(free_threaded));
  EXPECT_EQ(read().status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(read().status().message(), "it is a free-threaded build");
  free_threaded = 0;  // but every size 0: no field fits in its structure
  memcpy(bytes.data() + 16, &free_threaded, sizeof(free_threaded));
  EXPECT_EQ(read().status().code(), StatusCode::kInvalid);
  EXPECT_EQ(read().status().message(), "its _Py_DebugOffsets make no sense");
  EXPECT_EQ(bpf::ReadDebugOffsets(std::span(bytes).first(8), 0x030d00f0).status().code(),
            StatusCode::kInvalid);
}

// ---------------------------------------------------------------------------------------------
// gprof-run on py_frames.py.

// What the scenario says of itself: the frames of each role, the threads' tids and names.
struct Truth {
  uint32_t pid = 0;
  std::string python;
  struct Frame {
    std::string file, function;
    std::set<int> lines;
  };
  std::map<std::string, Frame> frames;  // by role: waiter, holder, release
  std::map<std::string, std::pair<uint32_t, std::string>> threads;  // role -> tid, name
  std::set<uint32_t> workers;
  std::vector<Fact> spans;
};

Truth ParseTruth(const std::string& out) {
  Truth truth;
  for (const Fact& fact : ParseFacts(out)) {
    if (fact.kind == "scenario") {
      truth.pid = static_cast<uint32_t>(std::stoul("0" + fact["pid"]));
      truth.python = fact["python"];
    } else if (fact.kind == "frame") {
      Truth::Frame& frame = truth.frames[fact["role"]];
      frame.file = fact["file"];
      frame.function = fact["function"];
      std::istringstream numbers(fact["lines"]);
      std::string number;
      while (std::getline(numbers, number, ',')) frame.lines.insert(std::stoi(number));
    } else if (fact.kind == "thread") {
      truth.threads[fact["role"]] = {static_cast<uint32_t>(std::stoul(fact["tid"])), fact["name"]};
    } else if (fact.kind == "workers") {
      std::istringstream numbers(fact["pids"]);
      std::string number;
      while (std::getline(numbers, number, ','))
        truth.workers.insert(static_cast<uint32_t>(std::stoul(number)));
    } else if (fact.kind == "span") {
      truth.spans.push_back(fact);
    }
  }
  return truth;
}

// Whether report.json's Python stack (its "frames") shows `frame` (any of its lines).
bool Shows(const json& stack, const Truth::Frame& frame) {
  if (!stack.is_object()) return false;
  for (const json& shown : stack["frames"]) {
    if (shown["file"] == frame.file && shown["function"] == frame.function &&
        shown["line"].is_number() && frame.lines.contains(shown["line"].get<int>()))
      return true;
  }
  return false;
}

// "file:line in function" for each of the frame's lines, as report.txt writes a program's frame.
bool TextShows(const std::string& text, const Truth::Frame& frame) {
  for (int line : frame.lines) {
    if (text.find(frame.file + ":" + std::to_string(line) + " in " + frame.function) !=
        std::string::npos)
      return true;
  }
  return false;
}

// The frame in the trace event's callstack, as the writer makes a Python frame: an interpreted
// frame (Frame.KIND_INTERPRETED) named "function (file:line)" in a mapping named by the file, and
// merged where the native stack ran it: every kernel frame inside it (innermost), no eval loop's
// native frame inside it (each eval loop's frame gives way to the Python frames it ran).
bool CallstackShows(const DecodedEvent& event, const Truth::Frame& frame) {
  const std::vector<std::string>& stack = event.callstack;
  for (size_t i = 0; i < stack.size(); ++i) {
    bool named = false;
    for (int line : frame.lines) {
      named |= stack[i] == "[py] " + frame.function + " (" + frame.file + ":" +
                               std::to_string(line) + ")";
    }
    if (!named || i >= event.callstack_where.size() ||
        event.callstack_where[i] != frame.file + "+0x0")
      continue;
    for (size_t outer = 0; outer < i; ++outer) {
      if (stack[outer].starts_with("[k] ")) return false;
    }
    // An eval loop's frame is left only when no Python frames are left for it: outside them all.
    for (size_t inner = i + 1; inner < stack.size(); ++inner) {
      if (stack[inner].starts_with("_PyEval_EvalFrameDefault")) return false;
    }
    return true;
  }
  return false;
}

// Every Python stack of report.json (objects with "frames" and "incomplete"), with the path to it.
void PythonStacksIn(const json& node, std::vector<const json*>* out) {
  if (node.is_object()) {
    if (node.contains("frames") && node.contains("incomplete")) out->push_back(&node);
    for (const auto& [key, value] : node.items()) PythonStacksIn(value, out);
  } else if (node.is_array()) {
    for (const json& value : node) PythonStacksIn(value, out);
  }
}

class PythonStacks : public ::testing::Test {
 protected:
  void SetUp() override { GPROF_NEED_BPF(); }

  // gprof-run on py_frames.py `mode` under `python`; false (with a failure) when anything fails.
  bool Run(const std::string& python, const std::string& mode,
           const std::vector<std::string>& options = {}, const std::vector<std::string>& env = {}) {
    ProcessSpec spec;
    spec.set_env = env;
    spec.argv = {GprofRunPath(), "-q", "-o", dir_->Sub("session")};
    spec.argv.insert(spec.argv.end(), options.begin(), options.end());
    spec.argv.insert(spec.argv.end(),
                     {"--", python, SourceDir() + "/tests/apps/py_frames.py", mode});
    spec.timeout_s = 180;
    ProcessResult run = RunProcess(spec);
    EXPECT_EQ(run.exit_code(), 0) << run.err;
    if (run.exit_code() != 0) return false;
    truth_ = ParseTruth(run.out);
    EXPECT_NE(truth_.pid, 0u) << run.out;
    report_ = json::parse(ReadFile(dir_->Sub("session/report.json")), nullptr, false);
    EXPECT_FALSE(report_.is_discarded());
    text_ = ReadFile(dir_->Sub("session/report.txt"));
    return truth_.pid != 0 && !report_.is_discarded();
  }

  // The stalls of `tid` (report.json's diagnosis).
  std::vector<const json*> StallsOf(uint32_t tid) const {
    std::vector<const json*> found;
    for (const json& stall : report_["diagnosis"]["stalls"]) {
      if (stall["thread"]["tid"] == tid) found.push_back(&stall);
    }
    return found;
  }

  // A stall of the waiter that waited at its line and was ended by the holder's release line.
  void ExpectWaiterAndRelease() {
    const uint32_t waiter = truth_.threads["waiter"].first;
    const uint32_t holder = truth_.threads["holder"].first;
    bool waited = false, released = false;
    for (const json* stall : StallsOf(waiter)) {
      const json& wait = (*stall)["wait"];
      if (!Shows(wait["python_stack"], truth_.frames["waiter"])) continue;
      waited = true;
      if (wait["waker_tid"] == holder &&
          Shows(wait["waker_python_stack"], truth_.frames["release"]))
        released = true;
    }
    EXPECT_TRUE(waited) << "no stall of the waiter at its line\n" << text_;
    EXPECT_TRUE(released) << "no stall of the waiter ended at the holder's release line\n" << text_;
    EXPECT_TRUE(TextShows(text_, truth_.frames["waiter"])) << text_;
    EXPECT_TRUE(TextShows(text_, truth_.frames["release"])) << text_;
  }

  // The Python thread names, where the kernel's name is the interpreter's.
  void ExpectThreadNames() {
    for (const char* role : {"waiter", "holder"}) {
      auto [tid, name] = truth_.threads[role];
      bool found = false;
      std::string native;
      for (const json& thread : report_["session"]["threads"]) {
        if (thread["tid"] != tid) continue;
        found = true;
        EXPECT_EQ(thread["python_name"], name);
        native = thread["name"];
      }
      EXPECT_TRUE(found) << role;
      bool named = false;
      for (const json* stall : StallsOf(tid)) named |= (*stall)["thread"]["name"] == name;
      if (std::string(role) == "waiter") {
        EXPECT_TRUE(named) << "the waiter's stalls by its name";
      }
      // report.txt quotes a thread's name (report_words.h, QuotedThread), the kernel's beside
      // Python's.
      EXPECT_NE(text_.find("\"" + name + "\" (" + (native == name ? "" : native + ", ") +
                           std::to_string(tid) + ")"),
                std::string::npos)
          << name << "\n"
          << text_;
    }
  }

  // No stack of the report names a frame of the program's module wrongly: each of its frames is
  // in the module, at a line of the function it names (the lines of py_frames.py's module are
  // unknown to the test, except those of the roles: checked there).
  void ExpectNoFrameMisnamed() {
    std::vector<const json*> stacks;
    PythonStacksIn(report_, &stacks);
    EXPECT_FALSE(stacks.empty());
    for (const json* stack : stacks) {
      for (const json& frame : (*stack)["frames"]) {
        if (frame["kind"] != "python" || !frame["file"].is_string()) continue;
        for (const auto& [role, truth] : truth_.frames) {
          if (frame["function"] != truth.function || !frame["line"].is_number()) continue;
          EXPECT_EQ(frame["file"], truth.file);
        }
      }
    }
  }

  std::unique_ptr<TempDir> dir_ = std::make_unique<TempDir>();
  Truth truth_;
  json report_;
  std::string text_;
};

TEST_F(PythonStacks, LockHeldAcrossASleep) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(Run(kSystemPython, "lock"));
  ExpectWaiterAndRelease();
  ExpectThreadNames();
  ExpectNoFrameMisnamed();
  // The python line of the header: which interpreter, read.
  EXPECT_NE(text_.find("CPython " + truth_.python), std::string::npos) << text_;
  // The trace carries the same frames on the waiter's wait.
  DecodedTrace trace = DecodeTraceFile(dir_->Sub("session/trace.perfetto-trace"));
  ASSERT_TRUE(trace.errors.empty()) << trace.errors.front();
  bool waited = false, released = false;
  for (const auto& event : trace.events) {
    EXPECT_FALSE(event.annotations.contains("python_stack")) << "a Python stack also as text";
    EXPECT_FALSE(event.annotations.contains("waker_python_stack")) << "a Python stack also as text";
    if (event.name.starts_with("runnable (woken by "))
      released |= CallstackShows(event, truth_.frames["release"]);
    else
      waited |= CallstackShows(event, truth_.frames["waiter"]);
  }
  EXPECT_TRUE(waited) << "no wait whose callstack has the waiter's line";
  EXPECT_TRUE(released) << "no runnable slice whose (waker's) callstack has the release line";
}

TEST_F(PythonStacks, OffByOption) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(Run(kSystemPython, "lock", {"--python-stacks=off"}));
  std::vector<const json*> stacks;
  PythonStacksIn(report_["diagnosis"], &stacks);
  EXPECT_TRUE(stacks.empty()) << stacks.front()->dump();
  EXPECT_FALSE(TextShows(text_, truth_.frames["waiter"]));
}

// A waiter 150 calls deep: its stack is the innermost 96 frames, marked truncated, each the right
// line; the report says so.
TEST_F(PythonStacks, DeepRecursionTruncated) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(Run(kSystemPython, "deep"));
  ExpectWaiterAndRelease();
  const Truth::Frame& waiter = truth_.frames["waiter"];
  const Truth::Frame& recursion = truth_.frames["recursion"];
  const json* deepest = nullptr;
  for (const json* stall : StallsOf(truth_.threads["waiter"].first)) {
    const json& stack = (*stall)["wait"]["python_stack"];
    if (Shows(stack, waiter)) deepest = &stack;
  }
  ASSERT_NE(deepest, nullptr);
  const json& frames = (*deepest)["frames"];
  ASSERT_EQ(frames.size(), size_t{GPROF_PYTHON_MAX_FRAMES});
  EXPECT_TRUE((*deepest)["truncated"].get<bool>());
  EXPECT_FALSE((*deepest)["incomplete"].get<bool>());
  EXPECT_EQ(frames[0]["line"], *waiter.lines.begin());
  for (size_t i = 1; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i]["function"], recursion.function) << i;
    EXPECT_EQ(frames[i]["line"], *recursion.lines.begin()) << i;
  }
  EXPECT_NE(text_.find("(truncated: deeper than"), std::string::npos) << text_;
}

TEST_F(PythonStacks, GilHeldInALongCCall) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(Run(kSystemPython, "gil"));
  ExpectWaiterAndRelease();
  ExpectNoFrameMisnamed();
  // The holder was on CPU in its C call: what it ran, sampled, is its line.
  const uint32_t holder = truth_.threads["holder"].first;
  bool sampled = false;
  std::vector<const json*> stacks;
  PythonStacksIn(report_["diagnosis"], &stacks);
  for (const json* stack : stacks)
    sampled |= (*stack)["tid"] == holder && Shows(*stack, truth_.frames["holder"]);
  EXPECT_TRUE(sampled) << "no stack of the holder at its line";
}

TEST_F(PythonStacks, MultiprocessingQueueWorkers) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(Run(kSystemPython, "mpqueue"));
  ExpectNoFrameMisnamed();
  ASSERT_EQ(truth_.workers.size(), 2u);
  // The main process waited in the consumer's line.
  bool waited = false;
  for (const json* stall : StallsOf(truth_.pid))
    waited |= Shows((*stall)["wait"]["python_stack"], truth_.frames["waiter"]);
  EXPECT_TRUE(waited) << text_;
  EXPECT_TRUE(TextShows(text_, truth_.frames["waiter"])) << text_;
  // The forked workers' frames are named (code objects of the parent, at the same addresses): the
  // producer's lines, in stacks of the workers' threads.
  std::set<uint32_t> worker_threads;
  for (const json& thread : report_["session"]["threads"]) {
    if (truth_.workers.contains(thread["pid"].get<uint32_t>()))
      worker_threads.insert(thread["tid"].get<uint32_t>());
  }
  std::vector<const json*> stacks;
  PythonStacksIn(report_["diagnosis"], &stacks);
  bool producer = false;
  for (const json* stack : stacks)
    producer |= worker_threads.contains((*stack)["tid"].get<uint32_t>()) &&
                Shows(*stack, truth_.frames["holder"]);
  EXPECT_TRUE(producer) << "no stack of a worker at the producer's lines\n" << text_;
}

TEST_F(PythonStacks, TorchDataLoaderWorkers) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ProcessResult torch = RunProcess(Command({kSystemPython, "-c", "import torch"}));
  if (torch.exit_code() != 0)
    FAIL() << "python3-torch is missing (scripts/setup.sh): " << torch.err;
  ASSERT_TRUE(Run(kSystemPython, "dataloader"));
  ExpectNoFrameMisnamed();
  bool waited = false;
  for (const json* stall : StallsOf(truth_.pid))
    waited |= Shows((*stall)["wait"]["python_stack"], truth_.frames["waiter"]);
  EXPECT_TRUE(waited) << text_;
  EXPECT_TRUE(TextShows(text_, truth_.frames["waiter"])) << text_;
  std::vector<const json*> stacks;
  PythonStacksIn(report_["diagnosis"], &stacks);
  bool item = false;
  for (const json* stack : stacks)
    item |= (*stack)["tid"] != truth_.pid && Shows(*stack, truth_.frames["holder"]);
  EXPECT_TRUE(item) << "no stack of a worker in the dataset's __getitem__\n" << text_;
}

// A slow CUDA call (the tests' fake runtime, through ctypes): its Python stack, read at the
// injected library's marker, names the line that called it, in report.json, report.txt and the
// trace's slice of the call.
TEST_F(PythonStacks, SlowCudaCall) {
  if (access(kSystemPython, X_OK) != 0) FAIL() << kSystemPython << " is missing (scripts/setup.sh)";
  ASSERT_TRUE(Run(kSystemPython, "cuda", {},
                  {"FAKE_CUDART=" + BuildDir() + "/tests/fake_cuda/libcudart.so.13"}));
  ExpectNoFrameMisnamed();
  size_t calls = 0;
  std::function<void(const json&)> find = [&](const json& node) {
    if (node.is_object()) {
      if (node.value("api", json()) == "cudaDeviceSynchronize" &&
          Shows(node.value("python_stack", json()), truth_.frames["waiter"]))
        ++calls;
      for (const auto& [key, value] : node.items()) find(value);
    } else if (node.is_array()) {
      for (const json& value : node) find(value);
    }
  };
  find(report_);
  EXPECT_GE(calls, 1u) << "no slow cudaDeviceSynchronize with the launcher's line\n" << text_;
  EXPECT_TRUE(TextShows(text_, truth_.frames["waiter"])) << text_;
  DecodedTrace trace = DecodeTraceFile(dir_->Sub("session/trace.perfetto-trace"));
  size_t slices = 0;
  for (const auto& event : trace.events) {
    EXPECT_FALSE(event.annotations.contains("python_stack")) << "a Python stack also as text";
    if (event.name != "cudaDeviceSynchronize" || !CallstackShows(event, truth_.frames["waiter"]))
      continue;
    ++slices;
    // The call's native stack (unwound through the interpreter) holds the Python frames where the
    // eval loop ran them, as report.json's "stack": native frames outside them and inside them.
    EXPECT_FALSE(event.callstack.front().starts_with("[py] ")) << event.callstack.front();
    EXPECT_FALSE(event.callstack.back().starts_with("[py] ")) << event.callstack.back();
  }
  EXPECT_EQ(slices, 3u) << "each of the three synchronizations, with its Python stack";
}

// A CPython gprof-run does not read (3.8, where pyenv has it): one line says so, the program
// runs as without us, and no stack shows a Python frame.
TEST_F(PythonStacks, UnsupportedPythonSaysSo) {
  ProcessResult ls = RunProcess(Command(
      {"/bin/sh", "-c", "ls -d /root/.pyenv/versions/3.8.*/bin/python3.8 2>/dev/null | tail -1"}));
  std::string python = ls.out.substr(0, ls.out.find('\n'));
  if (python.empty()) GTEST_SKIP() << "no pyenv CPython 3.8 in /root/.pyenv/versions";
  ASSERT_TRUE(Run(python, "lock"));
  EXPECT_NE(text_.find("runs Python 3.8"), std::string::npos) << text_;
  EXPECT_NE(text_.find("native stacks only"), std::string::npos) << text_;
  std::vector<const json*> stacks;
  PythonStacksIn(report_["diagnosis"], &stacks);
  EXPECT_TRUE(stacks.empty());
  EXPECT_EQ(report_["session"]["python"]["processes"][0]["stacks"], "unsupported");
}

// Every CPython from 3.9 to 3.13 that is installed here: the lock, waiter and holder.
TEST_F(PythonStacks, LockInEachInstalledPython) {
  std::vector<std::string> pythons = PyenvPythons();
  if (pythons.empty()) GTEST_SKIP() << "no pyenv CPython 3.9-3.13 in /root/.pyenv/versions";
  for (const std::string& python : pythons) {
    SCOPED_TRACE(python);
    dir_ = std::make_unique<TempDir>();  // a fresh session directory each
    if (!Run(python, "lock")) continue;
    ExpectWaiterAndRelease();
    ExpectThreadNames();
  }
}

}  // namespace
}  // namespace gprof::test
