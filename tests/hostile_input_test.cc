// Session files written by a hostile or broken program: names with quotes, control characters
// and bytes that are not UTF-8 reach every output escaped (the report, report.json and the trace
// stay valid and readable), and files that are not what their name says are refused by name and
// offset without hanging the reader.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <zstd.h>

#include "collector/collect.h"
#include "collector/model/elf_symbols.h"
#include "collector/session/chunk_reader.h"
#include "collector/session/read_progress.h"
#include "collector/session/session_meta.h"
#include "collector/session/session_reader.h"
#include "collector/writers/words/objects.h"
#include "tests/clean_utf8.h"
#include "tests/session_builder.h"
#include "tests/test_support.h"
#include "tests/trace_decoder.h"

namespace gprof::test {
namespace {

using collector::PrintableName;
using nlohmann::json;

constexpr uint32_t kPid = 100, kTid = 101;
constexpr uint64_t kMs = 1000000;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Every string in `value`, keys included.
void CollectStrings(const json& value, std::vector<std::string>* out) {
  if (value.is_string()) out->push_back(value.get<std::string>());
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      out->push_back(key);
      CollectStrings(item, out);
    }
  }
  if (value.is_array()) {
    for (const auto& item : value) CollectStrings(item, out);
  }
}

bool AnyContains(const std::vector<std::string>& texts, const std::string& needle) {
  for (const std::string& text : texts) {
    if (text.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(PrintableName, EscapesWhatIsNotStrictUtf8AndC1Controls) {
  EXPECT_EQ(PrintableName("\xe0\x80\xaf"), "\\xe0\\x80\\xaf") << "overlong '/'";
  EXPECT_EQ(PrintableName("\xc0\xaf"), "\\xc0\\xaf") << "overlong '/'";
  EXPECT_EQ(PrintableName("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "a surrogate";
  EXPECT_EQ(PrintableName("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80") << "past U+10FFFF";
  EXPECT_EQ(PrintableName("\xf0\x80\x80\x80"), "\\xf0\\x80\\x80\\x80") << "overlong";
  EXPECT_EQ(PrintableName("a\xc2\x9b"
                          "31m"),
            "a\\xc2\\x9b31m")
      << "C1 CSI";
  // The edges of what is valid stay.
  EXPECT_EQ(PrintableName("\xc2\xa0\xed\x9f\xbf\xee\x80\x80\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"),
            "\xc2\xa0\xed\x9f\xbf\xee\x80\x80\xf0\x90\x80\x80\xf4\x8f\xbf\xbf");
}

TEST(Shortened, NeverCutsAUtf8Character) {
  EXPECT_EQ(collector::Shortened("ab\xc3\xa9z", 3), "ab") << "not half of the e-acute";
  EXPECT_EQ(collector::Shortened("ab\xc3\xa9z", 4), "ab\xc3\xa9");
  EXPECT_EQ(collector::Shortened("\xf0\x9f\x98\x80", 2), "");
  EXPECT_EQ(collector::Shortened("short", 80), "short");
}

// Names as a hostile program could give them: quotes, terminal escapes, bytes that are not UTF-8.
const std::string kApiName = "cuda\x1b[2JLaunch\"Kernel\xc3";
const std::string kKernelName = "ker\x1b[31mnel\"<\\>\xe0\x80\x80";
const std::string kThreadName = "t\"\x01\xff";  // 15 bytes at most: a comm
const std::string kDevice = "nv\x1b\"\xff";
const std::string kKernelSymbol = "do_\x1bwait\xff";
const std::string kExe = "/opt/a\nb/app\xff";
const std::string kFrame = "fr\x07ame\xc2\x9b";
const std::string kMessage = "hello\x1b]0;title\x07";

// A session whose every name is hostile: a thread in one 5 ms CUDA call that runs a GPU kernel,
// sleeps in an ioctl on a device and off-CPU in a kernel function, with a native stack.
void WriteHostileSession(const TempDir& dir) {
  WriteText(dir.Sub("session.json"),
            R"({"version": 1, "tool_version": "0.1\u0000", "command": ["./app\u001b[2J", "a\"b",
              "caf\u00e9\u0085"], "root_pid": 100, "start": {"monotonic_ns": 1000000},
              "end": {"monotonic_ns": 90000000}, "exit": {"code": 0},
              "kernel_recording": {"enabled": true, "note": "\u0007"}})");
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, kPid), 0);
    RecordBatch batch;
    format::ProcessInfoRecord info{};
    info.pid = kPid;
    info.exe_len = static_cast<uint32_t>(kExe.size());
    const std::string cmdline = std::string("app\x1b[1m") + '\0' + "--x=\"\xff\"";
    info.cmdline_len = static_cast<uint32_t>(cmdline.size());
    batch.Add(info, format::kProcessInfo, kExe + cmdline);
    AddCaptureInfo(&batch, format::CaptureMode::kCupti, 130000, "libcupti\x1b[0m.so\xff");
    AddThreadName(&batch, kTid, kThreadName);
    AddApiName(&batch, 1, kApiName);
    format::ApiCallRecord call = ApiCall(kTid, 1, 10 * kMs, 15 * kMs);
    call.correlation_id = 7;
    batch.Add(call, format::kApiCall);
    AddGpuName(&batch, 1, kKernelName);
    batch.Add(KernelRecord(Placement(11 * kMs, 14 * kMs, 7, 13), 1), format::kGpuKernel);
    AddCallStack(&batch, kTid, 10 * kMs, {0x1000}, {kFrame});
    format::MessageRecord message{};
    message.text_len = static_cast<uint32_t>(kMessage.size());
    batch.Add(message, format::kMessage, kMessage);
    batch.WriteTo(&file);
  }
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
  RecordBatch batch;
  AddKernelStack(&batch, 3, {{0xffffffff81000000, kKernelSymbol}, {0xffffffff81000100, "x"}});
  AddProcessMaps(&batch, kPid, 1 * kMs,
                 "7f0000000000-7f0000100000 r-xp 00000000 08:01 42 /lib/li\x1b[7mb\xff.so\n");
  AddUserStack(&batch, 4, {0x7f0000000100});
  batch.Add(DeviceWaitEvent(kPid, kTid, 10 * kMs + 100, 12 * kMs, GPROF_DEVICE_IOCTL, kDevice,
                            0xc020462a),
            GPROF_REC_DEVICE_WAIT);
  gprof_offcpu off = OffCpu(kPid, kTid, 10 * kMs + 200, 14 * kMs, 14 * kMs, 0, 3);
  off.user_stack_id = 4;
  batch.Add(off, GPROF_REC_OFFCPU);
  batch.WriteTo(&file);
}

TEST(HostileNames, ReachEveryOutputEscapedAndTheOutputsStayValid) {
  TempDir dir;
  WriteHostileSession(dir);
  auto result = collector::Collect(dir.path(), collector::CollectOptions{});
  ASSERT_TRUE(result.ok()) << result.status().message();

  // The text report: no control character but its newlines, and the names escaped.
  const std::string& text = result->text_report;
  EXPECT_TRUE(IsCleanUtf8(text, "\n")) << text;
  for (const std::string& name : {kKernelName, kMessage}) {
    EXPECT_NE(text.find(PrintableName(name)), std::string::npos) << PrintableName(name) << "\n"
                                                                 << text;
  }
  EXPECT_NE(text.find("./app\\x1b[2J"), std::string::npos) << text;

  // report.json: strict JSON (the parser rejects invalid UTF-8), every string clean.
  std::string json_text = ReadFile(dir.Sub(collector::kJsonReportFile));
  json report = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(report.is_discarded());
  std::vector<std::string> strings;
  CollectStrings(report, &strings);
  for (const std::string& text : strings) EXPECT_TRUE(IsCleanUtf8(text)) << text;
  for (const std::string& name : {kKernelName, kApiName, kExe, kMessage, kThreadName}) {
    EXPECT_TRUE(AnyContains(strings, PrintableName(name))) << PrintableName(name);
  }

  // The trace: decodes by the rules, every string clean, the names there escaped.
  DecodedTrace trace = DecodeTraceFile(dir.Sub(collector::kTraceFile));
  EXPECT_TRUE(trace.errors.empty()) << trace.errors.front();
  std::vector<std::string> trace_strings;
  for (const DecodedTrack& track : trace.tracks) {
    trace_strings.push_back(track.name);
    trace_strings.push_back(track.thread_name.value_or(""));
    trace_strings.push_back(track.process_name);
    trace_strings.insert(trace_strings.end(), track.cmdline.begin(), track.cmdline.end());
  }
  for (const DecodedEvent& event : trace.events) {
    trace_strings.push_back(event.name);
    for (const auto& [key, value] : event.annotations) {
      trace_strings.push_back(key);
      trace_strings.push_back(value);
    }
    trace_strings.insert(trace_strings.end(), event.callstack.begin(), event.callstack.end());
    trace_strings.insert(trace_strings.end(), event.callstack_where.begin(),
                         event.callstack_where.end());
  }
  for (const std::string& text : trace_strings) EXPECT_TRUE(IsCleanUtf8(text, "\n")) << text;
  for (const std::string& name :
       {kKernelName, kApiName, kThreadName, kDevice, kKernelSymbol, kMessage}) {
    EXPECT_TRUE(AnyContains(trace_strings, PrintableName(name))) << PrintableName(name);
  }
  EXPECT_TRUE(AnyContains(trace_strings, "li\\x1b[7mb\\xff.so")) << "the mapped file's name";
  // The call's native stack is in the reports.
  EXPECT_TRUE(AnyContains(strings, PrintableName(kFrame)) ||
              text.find(PrintableName(kFrame)) != std::string::npos)
      << PrintableName(kFrame);
}

TEST(HostileNames, ASessionPathIsShownEscaped) {
  TempDir dir;
  std::string odd = dir.Sub("s\x1b[2J\xff");
  ASSERT_EQ(mkdir(odd.c_str(), 0700), 0);
  WriteText(odd + "/kernel.gpr", "garbage");
  auto result = collector::Collect(odd, collector::CollectOptions{});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_TRUE(IsCleanUtf8(result->text_report, "\n")) << result->text_report;
  EXPECT_NE(result->text_report.find("s\\x1b[2J\\xff"), std::string::npos) << result->text_report;
  ASSERT_FALSE(result->warnings.empty());
  EXPECT_TRUE(IsCleanUtf8(result->warnings.front())) << result->warnings.front();
  EXPECT_FALSE(
      json::parse(ReadFile(odd + "/" + collector::kJsonReportFile), nullptr, false).is_discarded());

  auto missing = collector::ReadSession(dir.Sub("gone\n\x1b[2J"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message().find('\n'), std::string::npos)
      << "one line: " << missing.status().message();
}

// --- files that are not what their names say ---

TEST(HostileFiles, FifosAndDirectoriesAreRefusedByNameWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(mkfifo(dir.Sub("kernel.gpr").c_str(), 0600), 0);
  ASSERT_EQ(mkfifo(dir.Sub("session.json").c_str(), 0600), 0);
  ASSERT_EQ(mkdir(dir.Sub("inject-5.gpr").c_str(), 0700), 0);
  alarm(20);  // a reader that blocks on a FIFO fails here rather than hanging the run
  auto session = collector::ReadSession(dir.path());
  alarm(0);
  ASSERT_TRUE(session.ok()) << session.status().message();
  std::string all;
  for (const auto& d : session->diagnostics) all += d.file + ": " + d.message + "\n";
  EXPECT_NE(all.find(dir.Sub("kernel.gpr") + ": not a regular file"), std::string::npos) << all;
  EXPECT_NE(all.find(dir.Sub("inject-5.gpr") + ": not a regular file"), std::string::npos) << all;
  EXPECT_NE(all.find(dir.Sub("session.json") + ": unreadable or not a regular file"),
            std::string::npos)
      << all;
}

TEST(HostileFiles, BrokenSessionJsonIsNamedWithTheOffsetOfTheFault) {
  TempDir dir;
  const std::string broken = R"({"version": 1, "command": ["a",, "b"]})";
  WriteText(dir.Sub("session.json"), broken);
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->diagnostics.size(), 1u);
  EXPECT_EQ(session->diagnostics[0].file, dir.Sub("session.json"));
  EXPECT_EQ(session->diagnostics[0].offset, broken.find(",,") + 1);
  EXPECT_NE(session->diagnostics[0].message.find("not valid JSON"), std::string::npos);

  WriteText(dir.Sub("session.json"), "[1, 2]");
  session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->diagnostics.size(), 1u);
  EXPECT_NE(session->diagnostics[0].message.find("not a JSON object"), std::string::npos);
}

TEST(HostileFiles, AVersionPastIntsRangeIsStillNewer) {
  TempDir dir;
  for (const char* version : {"4294967296", "18446744073709551615"}) {
    WriteText(dir.Sub("session.json"), std::string(R"({"version": )") + version + "}");
    auto session = collector::ReadSession(dir.path());
    ASSERT_FALSE(session.ok()) << version;
    EXPECT_NE(
        session.status().message().find(dir.Sub("session.json") + ": session written by a newer"),
        std::string::npos)
        << session.status().message();
  }
}

TEST(HostileFiles, AMalformedRecordIsPlacedInItsChunk) {
  TempDir dir;
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
  RecordBatch batch;
  batch.Add(OffCpu(1, 2, 10, 20, 0, 0, -1), GPROF_REC_OFFCPU);
  batch.Add(format::RecordHeader{}, GPROF_REC_FUTEX);  // far too short for a futex record
  batch.WriteTo(&file);
  file.Close();
  WriteText(dir.Sub("session.json"), R"({"version": 1})");
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  ASSERT_EQ(session->diagnostics.size(), 1u) << session->diagnostics[0].message;
  EXPECT_EQ(session->diagnostics[0].offset, sizeof(format::FileHeader));
  EXPECT_NE(session->diagnostics[0].message.find("malformed futex record skipped (record at byte " +
                                                 std::to_string(sizeof(gprof_offcpu)) +
                                                 " of the chunk's records)"),
            std::string::npos)
      << session->diagnostics[0].message;
}


// --- session.json that no parser may trust (issue 17, section 5) ---

// The diagnostics of `session` about files whose name ends with `name`, one line each.
std::vector<collector::Diagnostic> DiagnosticsOf(const collector::Session& session,
                                                 const std::string& name) {
  std::vector<collector::Diagnostic> found;
  for (const auto& diagnostic : session.diagnostics) {
    if (diagnostic.file.ends_with(name)) found.push_back(diagnostic);
  }
  return found;
}

std::string Lines(const std::vector<collector::Diagnostic>& diagnostics) {
  std::string text;
  for (const auto& d : diagnostics) text += d.file + " @" + std::to_string(d.offset) + ": " + d.message + "\n";
  return text;
}

// An inject file with one CUDA call: what session.json's trouble must leave readable.
void WriteOneCall(const TempDir& dir) {
  ChunkFileWriter file;
  ASSERT_EQ(file.Create(dir.Sub("inject-100.gpr").c_str(), format::Source::kInject, kPid), 0);
  RecordBatch batch;
  AddApiName(&batch, 1, "cudaLaunchKernel");
  batch.Add(ApiCall(kTid, 1, 10 * kMs, 11 * kMs), format::kApiCall);
  batch.WriteTo(&file);
}

TEST(HostileSessionJson, ANumberPastADoublesRangeIsNamedAndTheRestIsRead) {
  for (const std::string& number : {std::string("1e400"), std::string("-1e400"), std::string(401, '9')}) {
    SCOPED_TRACE(number.substr(0, 10));
    TempDir dir;
    WriteOneCall(dir);
    const std::string text = R"({"version": 1, "command": ["app", "--x"], "root_pid": 100,
        "start": {"monotonic_ns": )" + number + R"(, "realtime_ns": 5}, "exit": {"code": 3},
        "finished": true, "kernel_recording": {"enabled": true, "note": "n"}})";
    WriteText(dir.Sub("session.json"), text);
    auto session = collector::ReadSession(dir.path());
    ASSERT_TRUE(session.ok()) << session.status().message();
    EXPECT_EQ(session->meta.command, (std::vector<std::string>{"app", "--x"}));
    EXPECT_EQ(session->meta.root_pid, 100u);
    EXPECT_EQ(session->meta.start_realtime_ns, 5u);
    EXPECT_EQ(session->meta.start_monotonic_ns, 0u) << "unknown, not a wrapped value";
    EXPECT_EQ(session->meta.exit_code, 3);
    EXPECT_TRUE(session->meta.kernel_recording);
    EXPECT_EQ(session->api_calls.size(), 1u) << "the recording files are read all the same";
    auto lines = DiagnosticsOf(*session, "session.json");
    ASSERT_EQ(lines.size(), 1u) << Lines(session->diagnostics);
    EXPECT_EQ(lines[0].offset, text.find(number));
    EXPECT_NE(lines[0].message.find("field start.monotonic_ns: " + number.substr(0, 10)),
              std::string::npos)
        << lines[0].message;
    EXPECT_EQ(lines[0].message.find('\n'), std::string::npos);
    EXPECT_LT(lines[0].message.size(), 200u) << "a 401-digit number is shortened";
  }
}

TEST(HostileSessionJson, AnOverflowingNumberIsNoStringEither) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), R"({"version": 1, "command": ["app", 1e400, "x"],
      "tool_version": 2e999, "kernel_recording": {"note": "\u0000 1e400"}})");
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->meta.command, (std::vector<std::string>{"app", "x"}));
  EXPECT_EQ(session->meta.tool_version, "");
  EXPECT_EQ(session->meta.kernel_recording_note, "\\x00 1e400") << "a string, escaped";
  std::string all = Lines(session->diagnostics);
  EXPECT_NE(all.find("field command[1]: 1e400 is not a string"), std::string::npos) << all;
  EXPECT_NE(all.find("field tool_version: 2e999 is not a string"), std::string::npos) << all;
}

TEST(HostileSessionJson, TheWholeReportSurvivesAnOverflowingNumber) {
  TempDir dir;
  WriteOneCall(dir);
  WriteText(dir.Sub("session.json"),
            R"({"version": 1, "command": ["app"], "end": {"monotonic_ns": 1e999}})");
  auto result = collector::Collect(dir.path(), collector::CollectOptions{});
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_NE(result->text_report.find("field end.monotonic_ns: 1e999"), std::string::npos)
      << result->text_report;
  EXPECT_NE(result->text_report.find("command   app"), std::string::npos) << result->text_report;
}

TEST(HostileSessionJson, NumbersOutsideAFieldsRangeAreRefusedNotWrapped) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), R"({"version": 1, "root_pid": 4294967296,
      "start": {"monotonic_ns": -1, "realtime_ns": 1.5}, "exit": {"code": 99999999999,
      "signal": -3}, "window": {"delay_s": -2, "duration_s": 1e300, "start_monotonic_ns": 7},
      "finished": "yes", "command": ["a", 5, "b"], "kernel_recording": []})");
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok()) << session.status().message();
  const collector::SessionMeta& meta = session->meta;
  EXPECT_EQ(meta.root_pid, 0u);
  EXPECT_EQ(meta.start_monotonic_ns, 0u);
  EXPECT_EQ(meta.start_realtime_ns, 0u);
  EXPECT_FALSE(meta.exit_code.has_value());
  EXPECT_FALSE(meta.exit_signal.has_value());
  ASSERT_TRUE(meta.window.has_value());
  EXPECT_EQ(meta.window->delay_s, 0);
  EXPECT_EQ(meta.window->duration_s, 1e300);
  EXPECT_EQ(meta.window->start_monotonic_ns, 7u);
  EXPECT_EQ(meta.command, (std::vector<std::string>{"a", "b"}));
  std::string all = Lines(session->diagnostics);
  for (const char* field : {"root_pid: 4294967296", "start.monotonic_ns: -1",
                            "start.realtime_ns: 1.5", "exit.code: 99999999999", "exit.signal: -3",
                            "window.delay_s: -2", "finished: a string", "command[1]: 5",
                            "kernel_recording: an array"}) {
    EXPECT_NE(all.find(std::string("field ") + field + " is not "), std::string::npos)
        << field << "\n" << all;
  }
  EXPECT_EQ(all.find("duration_s"), std::string::npos) << all;
}

TEST(HostileSessionJson, NullIsAnUnknownValueNotAnError) {
  TempDir dir;
  WriteText(dir.Sub("session.json"),
            R"({"version": 1, "root_pid": null, "window": {"delay_s": 1, "duration_s": null}})");
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_TRUE(session->diagnostics.empty()) << Lines(session->diagnostics);
  ASSERT_TRUE(session->meta.window.has_value());
  EXPECT_EQ(session->meta.window->delay_s, 1);
}

TEST(HostileSessionJson, DeepNestingIsRefusedWithoutOverflowingTheStack) {
  for (const auto& [open, close] : {std::pair{"[", "]"}, std::pair{"{\"a\":", "}"}}) {
    TempDir dir;
    WriteOneCall(dir);
    std::string text = R"({"version": 1, "start": )";
    const size_t first_too_deep = text.size() + (collector::kMaxSessionMetaDepth - 1) *
                                                    std::string_view(open).size();
    for (int i = 0; i < 300000; ++i) text += open;
    text += "1";
    for (int i = 0; i < 300000; ++i) text += close;
    text += "}";
    WriteText(dir.Sub("session.json"), text);
    auto session = collector::ReadSession(dir.path());
    ASSERT_TRUE(session.ok()) << session.status().message();
    auto lines = DiagnosticsOf(*session, "session.json");
    ASSERT_EQ(lines.size(), 1u) << Lines(session->diagnostics);
    EXPECT_EQ(lines[0].offset, first_too_deep);
    EXPECT_NE(lines[0].message.find("nested deeper than 32 levels"), std::string::npos);
    EXPECT_EQ(session->api_calls.size(), 1u);
  }
}

TEST(HostileSessionJson, AFileLargerThanTheLimitIsNotReadAndTheRestIs) {
  TempDir dir;
  WriteOneCall(dir);
  const std::string text = R"({"version": 1, "command": ["app"]})";
  // Exactly the limit: read.
  WriteText(dir.Sub("session.json"),
            text + std::string(collector::kMaxSessionMetaBytes - text.size(), ' '));
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->meta.command, std::vector<std::string>{"app"}) << Lines(session->diagnostics);
  // One byte more: refused by its size, in one line.
  WriteText(dir.Sub("session.json"),
            text + std::string(collector::kMaxSessionMetaBytes + 1 - text.size(), ' '));
  session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_TRUE(session->meta.command.empty());
  auto lines = DiagnosticsOf(*session, "session.json");
  ASSERT_EQ(lines.size(), 1u) << Lines(session->diagnostics);
  EXPECT_NE(lines[0].message.find("larger than 64 MiB"), std::string::npos) << lines[0].message;
  EXPECT_EQ(session->api_calls.size(), 1u);
}

TEST(HostileSessionJson, ASparseHugeFileCostsNoMoreThanTheLimit) {
  TempDir dir;
  WriteOneCall(dir);
  int fd = open(dir.Sub("session.json").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{10} << 30), 0);  // 10 GiB, all of it a hole
  close(fd);
  auto start = std::chrono::steady_clock::now();
  auto session = collector::ReadSession(dir.path());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(session.ok());
  EXPECT_LT(seconds, 20) << "read no further than the limit";
  auto lines = DiagnosticsOf(*session, "session.json");
  ASSERT_EQ(lines.size(), 1u) << Lines(session->diagnostics);
  EXPECT_NE(lines[0].message.find("larger than"), std::string::npos);
}

TEST(HostileSessionJson, MillionsOfTinyValuesAreNotAllKept) {
  TempDir dir;
  std::string text = R"({"version": 1, "x": [)";
  for (int i = 0; i < 200000; ++i) text += "{},";
  text += R"({}], "recording_stopped": [)";
  for (int i = 0; i < 200000; ++i) text += R"({"file": "kernel.gpr"},)";
  text += R"({"file": "kernel.gpr"}], "command": ["app"]})";
  WriteText(dir.Sub("session.json"), text);
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->meta.command, std::vector<std::string>{"app"});
  EXPECT_LE(session->recording_stops.size(), 1024u) << "gprof-run writes one at most";
  EXPECT_NE(Lines(session->diagnostics).find("holds more values than gprof-run writes"),
            std::string::npos)
      << Lines(session->diagnostics);
}

// --- recording files that are huge, holed, or damaged all through (issue 17, section 5) ---

// A kernel.gpr with one off-CPU interval in each of `chunks` chunks; the offset where each chunk
// starts (the last entry: the file's end).
std::vector<uint64_t> WriteOffCpuChunks(const std::string& path, int chunks) {
  std::vector<uint64_t> starts;
  ChunkFileWriter file;
  EXPECT_EQ(file.Create(path.c_str(), format::Source::kKernel, 1), 0);
  for (int i = 0; i < chunks; ++i) {
    struct stat info {};
    stat(path.c_str(), &info);
    starts.push_back(static_cast<uint64_t>(info.st_size));
    RecordBatch batch;
    batch.Add(OffCpu(kPid, kTid, (10 + 2 * i) * kMs, (11 + 2 * i) * kMs, 0, 0, -1),
              GPROF_REC_OFFCPU);
    batch.WriteTo(&file);
  }
  file.Close();
  struct stat info {};
  stat(path.c_str(), &info);
  starts.push_back(static_cast<uint64_t>(info.st_size));
  return starts;
}

TEST(HostileChunkFiles, AHoleIsSkippedUnreadAndNamed) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), R"({"version": 1})");
  std::vector<uint64_t> starts = WriteOffCpuChunks(dir.Sub("kernel.gpr"), 2);
  // The second chunk moved 64 GiB further: a hole between the two, as a file extended by a seek
  // or truncate has.
  std::string bytes = ReadFile(dir.Sub("kernel.gpr"));
  const uint64_t hole = uint64_t{64} << 30;
  int fd = open(dir.Sub("kernel.gpr").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const std::string second = bytes.substr(starts[1]);
  ASSERT_EQ(pwrite(fd, second.data(), second.size(), static_cast<off_t>(starts[1] + hole)),
            static_cast<ssize_t>(second.size()));
  ASSERT_EQ(pwrite(fd, std::string(second.size(), '\0').data(), second.size(),
                   static_cast<off_t>(starts[1])),
            static_cast<ssize_t>(second.size()));
  close(fd);

  auto start = std::chrono::steady_clock::now();
  auto session = collector::ReadSession(dir.path());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_LT(seconds, 10) << "a hole is skipped, not read (64 GiB took about 3 minutes)";
  EXPECT_EQ(session->off_cpu.size(), 2u) << Lines(session->diagnostics);
  auto lines = DiagnosticsOf(*session, "kernel.gpr");
  ASSERT_EQ(lines.size(), 1u) << Lines(session->diagnostics);
  EXPECT_EQ(lines[0].offset, starts[1]);
  EXPECT_NE(lines[0].message.find("a hole in the file"), std::string::npos) << lines[0].message;
  EXPECT_NE(lines[0].message.find("skipped " + std::to_string(hole) + " bytes"), std::string::npos)
      << lines[0].message;
}

TEST(HostileChunkFiles, ManySmallDamagesCostLittleAndAreListedInFewLines) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), R"({"version": 1})");
  constexpr int kChunks = 40000;
  std::vector<uint64_t> starts = WriteOffCpuChunks(dir.Sub("kernel.gpr"), kChunks);
  // Garbage after every chunk, and every other chunk's payload damaged.
  std::string bytes = ReadFile(dir.Sub("kernel.gpr"));
  std::string damaged = bytes.substr(0, starts[0]);
  for (int i = 0; i < kChunks; ++i) {
    std::string chunk = bytes.substr(starts[i], starts[i + 1] - starts[i]);
    if (i % 2 == 1) chunk.back() ^= 0x5a;
    damaged += chunk + "junk!";
  }
  WriteText(dir.Sub("kernel.gpr"), damaged);

  auto start = std::chrono::steady_clock::now();
  auto session = collector::ReadSession(dir.path());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(session.ok());
  EXPECT_LT(seconds, 10) << "a few KiB read a damage, not 1 MiB (40,000 took a minute)";
  EXPECT_EQ(session->off_cpu.size(), static_cast<size_t>(kChunks / 2));
  auto lines = DiagnosticsOf(*session, "kernel.gpr");
  ASSERT_EQ(lines.size(), 21u) << "20 listed, the rest counted";
  // The junk after each good chunk (the search past a damaged one skips its junk), each damaged
  // chunk, and the jump in sequence after each but the last.
  EXPECT_EQ(lines.back().message, std::to_string(3 * (kChunks / 2) - 1 - 20) +
                                      " more problems in this file, not listed");
}

TEST(HostileChunkFiles, AChunkClaimingHugeSizesIsSkipped) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), R"({"version": 1})");
  std::vector<uint64_t> starts = WriteOffCpuChunks(dir.Sub("kernel.gpr"), 2);
  std::string bytes = ReadFile(dir.Sub("kernel.gpr"));
  format::ChunkHeader header;
  memcpy(&header, bytes.data() + starts[0], sizeof(header));
  header.raw_size = 0xffffffff;
  header.stored_size = 0xfffffff0;
  header.record_count = 0xffffffff;
  memcpy(bytes.data() + starts[0], &header, sizeof(header));
  WriteText(dir.Sub("kernel.gpr"), bytes);
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->off_cpu.size(), 1u) << "the second chunk";
  auto lines = DiagnosticsOf(*session, "kernel.gpr");
  ASSERT_EQ(lines.size(), 2u) << Lines(session->diagnostics);
  EXPECT_NE(lines[0].message.find("damaged chunk header"), std::string::npos) << lines[0].message;
}

TEST(HostileChunkFiles, ADecompressionBombIsRefusedUndecoded) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), R"({"version": 1})");
  std::vector<uint64_t> starts = WriteOffCpuChunks(dir.Sub("kernel.gpr"), 2);
  // Between the two: 2 MiB of zeros, which zstd stores in a few dozen bytes.
  std::string zeros(2 << 20, '\0');
  std::string stored(ZSTD_compressBound(zeros.size()), '\0');
  size_t size = ZSTD_compress(stored.data(), stored.size(), zeros.data(), zeros.size(), 1);
  ASSERT_FALSE(ZSTD_isError(size));
  stored.resize(size);
  format::ChunkHeader bomb{};
  bomb.magic = format::kChunkMagic;
  bomb.compression = static_cast<uint32_t>(format::Compression::kZstd);
  bomb.stored_size = static_cast<uint32_t>(stored.size());
  bomb.raw_size = static_cast<uint32_t>(zeros.size());
  bomb.record_count = 1;
  bomb.payload_checksum = format::Fnv1a32(stored.data(), stored.size());
  bomb.sequence = 1;
  std::string bytes = ReadFile(dir.Sub("kernel.gpr"));
  bytes.insert(starts[1], std::string(reinterpret_cast<const char*>(&bomb), sizeof(bomb)) + stored);
  WriteText(dir.Sub("kernel.gpr"), bytes);
  auto session = collector::ReadSession(dir.path());
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session->off_cpu.size(), 2u) << Lines(session->diagnostics);
  auto lines = DiagnosticsOf(*session, "kernel.gpr");
  ASSERT_GE(lines.size(), 1u);
  EXPECT_EQ(lines[0].offset, starts[1]);
  EXPECT_NE(lines[0].message.find("chunk 1 unreadable: would decompress to 2097152 bytes from " +
                                  std::to_string(stored.size()) + ", more than 1024 times"),
            std::string::npos)
      << lines[0].message;
}

// Collect turns what nothing below it catches into an error: here, memory running out.
TEST(HostileChunkFiles, RunningOutOfMemoryIsAnErrorNotAnAbort) {
  TempDir dir;
  WriteText(dir.Sub("session.json"), R"({"version": 1})");
  {
    ChunkFileWriter file;
    ASSERT_EQ(file.Create(dir.Sub("kernel.gpr").c_str(), format::Source::kKernel, 1), 0);
    for (int chunk = 0; chunk < 40; ++chunk) {
      RecordBatch batch;
      for (int i = 0; i < 50000; ++i) {
        uint64_t at = (uint64_t(chunk) * 50000 + i) * 1000;
        batch.Add(OffCpu(kPid, kTid + i % 50, at, at + 500, at + 400, kPid, kTid), GPROF_REC_OFFCPU);
      }
      batch.WriteTo(&file);
    }
  }
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // 64 MiB of address space past what the process holds: the 2,000,000 records need more.
    uint64_t size_pages = 0;
    if (FILE* statm = fopen("/proc/self/statm", "r")) {
      if (fscanf(statm, "%lu", &size_pages) != 1) size_pages = 0;
      fclose(statm);
    }
    rlimit limit{};
    limit.rlim_cur = limit.rlim_max = size_pages * 4096 + (64 << 20);
    setrlimit(RLIMIT_AS, &limit);
    // noexcept: an exception out of Collect aborts here, rather than reaching gtest's handler.
    [&]() noexcept {
      collector::CollectOptions options;
      options.write_files = false;
      auto result = collector::Collect(dir.path(), options);
      _exit(result.ok() ? 10 : (result.status().message().find(dir.path()) == 0 ? 11 : 12));
    }();
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status);
  EXPECT_NE(WEXITSTATUS(status), 12) << "an error that does not name the session";
}

// --- a long read shows how far it is, on a terminal only ---

std::string Drain(int fd) {
  std::string text;
  char buffer[4096];
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

TEST(ReadProgress, ALineOnATerminalUpdatedInPlaceAndErasedAtTheEnd) {
  int master = -1, terminal = -1;
  ASSERT_EQ(openpty(&master, &terminal, nullptr, nullptr, nullptr), 0);
  {
    collector::ReadProgress progress(terminal, /*delay_ns=*/0);
    progress.StartFile("kernel\x1b[2J.gpr", uint64_t{100} << 30);
    progress.At(uint64_t{123} << 27);  // 15.375 GiB
  }
  std::string shown = Drain(master);
  EXPECT_EQ(shown,
            "\rgprof-run: reading kernel\\x1b[2J.gpr: 15.4 of 100.0 GiB...\x1b[K"
            "\r\x1b[K");
  {
    collector::ReadProgress progress(terminal, /*delay_ns=*/uint64_t{3600} * 1000000000);
    progress.StartFile("kernel.gpr", 1 << 30);
    progress.At(1 << 29);
  }
  EXPECT_EQ(Drain(master), "") << "nothing before the delay";
  close(master);
  close(terminal);

  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  {
    collector::ReadProgress progress(pipe_fds[1], 0);
    progress.StartFile("kernel.gpr", 1 << 30);
    progress.At(1 << 29);
  }
  close(pipe_fds[1]);
  EXPECT_EQ(Drain(pipe_fds[0]), "") << "nothing where it is not a terminal";
  close(pipe_fds[0]);
}

TEST(ReadProgress, TheChunkReaderSaysWhichFileAndHowFar) {
  TempDir dir;
  WriteOffCpuChunks(dir.Sub("kernel.gpr"), 3);
  int master = -1, terminal = -1;
  ASSERT_EQ(openpty(&master, &terminal, nullptr, nullptr, nullptr), 0);
  {
    collector::ReadProgress progress(terminal, 0);
    std::vector<collector::Diagnostic> diagnostics;
    auto summary = collector::ReadChunkFile(
        dir.Sub("kernel.gpr"), [](const collector::RecordView&) {}, &diagnostics, &progress);
    ASSERT_TRUE(summary.ok());
  }
  std::string shown = Drain(master);
  EXPECT_EQ(shown.rfind("\rgprof-run: reading kernel.gpr: ", 0), 0u) << shown;
  EXPECT_TRUE(shown.ends_with("\r\x1b[K")) << shown;
  close(master);
  close(terminal);
}

// --- files this machine has, named by a session's maps ---

// The symbolizer checks what a mapped path is before it reads it, but the path may change in
// between (a session's maps name paths anyone may own): what it opens must be what it checked.
TEST(HostileFiles, TheSymbolizerOpensNothingButARegularFile) {
  TempDir dir;
  const std::string fifo = dir.Sub("lib.so");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  alarm(30);  // opening the FIFO for reading would block here
  auto file = collector::ElfSymbolFile::Read(fifo);
  alarm(0);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(), fifo + ": not a regular file");
}

}  // namespace
}  // namespace gprof::test
