// Session files written by a hostile or broken program: names with quotes, control characters
// and bytes that are not UTF-8 reach every output escaped (the report, report.json and the trace
// stay valid and readable), and files that are not what their name says are refused by name and
// offset without hanging the reader.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "clean_utf8.h"
#include "collect.h"
#include "report_format.h"
#include "session_builder.h"
#include "session_reader.h"
#include "test_support.h"
#include "trace_decoder.h"

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

}  // namespace
}  // namespace gprof::test
