// One session, three outputs: report.txt, report.json and report.html give each cause the same
// class label and each freeze the same number (1: the longest, as the text's SUMMARY says), so
// that "cause 2 [host late]" and "freeze 1" mean one thing wherever a user reads them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "collector/writers/report.h"
#include "collector/writers/report_html.h"
#include "tests/analysis_sessions.h"

namespace gprof::collector {
namespace {

constexpr uint64_t kEarlyLock = 0x7f0000003000;
constexpr uint64_t kLateLock = 0x7f0000004000;

// A thread late to launch the next GPU work (a cause of its own, no wait's class), and two
// freezes on two locks: a short one first, then a long one, so that the earliest is not the
// longest.
Session LateHostAndTwoFreezes() {
  SessionBuilder builder;
  builder.Thread(21, "early-a");
  builder.Thread(22, "early-b");
  builder.Thread(31, "late-a");
  builder.Thread(32, "late-b");
  LockSleep(&builder, 21, kEarlyLock, 1 * kMs, 6 * kMs, 6 * kMs + 10 * kUs, kHolder, kHolder);
  LockSleep(&builder, 22, kEarlyLock, 2 * kMs, 7 * kMs, 7 * kMs + 10 * kUs, 21, kHolder);
  LockSleep(&builder, 31, kLateLock, 70 * kMs, 150 * kMs, 150 * kMs + 10 * kUs, kHolder, kHolder);
  LockSleep(&builder, 32, kLateLock, 71 * kMs, 155 * kMs, 155 * kMs + 10 * kUs, 31, kHolder);
  return LateLaunch(builder, "cudaLaunchKernel", 20 * kMs, 40 * kMs);
}

struct Outputs {
  Session session;
  Analysis analysis;
  std::string text;
  nlohmann::json json;
  std::string html;
};

Outputs Render() {
  Outputs out{LateHostAndTwoFreezes(), {}, {}, {}, {}};
  out.analysis = Analyze(out.session, {});
  out.text = RenderTextReport(out.session, out.analysis);
  out.json = RenderJsonReport(out.session, out.analysis);
  out.html = RenderHtmlReport(out.session, out.analysis, out.text);
  return out;
}

// Every match of `pattern`'s first group in `text`, in order.
std::vector<std::string> All(const std::string& text, const std::string& pattern) {
  std::vector<std::string> found;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    found.push_back((*it)[1].str());
  return found;
}

TEST(VocabularyConsistency, EachCauseHasOneClassLabelInTextJsonAndHtml) {
  Outputs out = Render();
  const nlohmann::json& causes = out.json["diagnosis"]["causes"];
  ASSERT_GE(causes.size(), 3u) << out.text;
  bool late_host = false;
  for (const Cause& cause : out.analysis.causes) late_host |= cause.kind == CauseKind::kLateHost;
  ASSERT_TRUE(late_host) << "the session has a thread late to launch: " << out.text;
  // The SUMMARY's "  2. [host late] ...", the page's "<b>[host late]</b>", report.json's label.
  const std::string summary = out.text.substr(0, out.text.find("\nCAUSES"));
  std::vector<std::string> text_labels = All(summary, R"(\n +[0-9]+\. \[([^\]]+)\])");
  std::vector<std::string> html_labels = All(out.html, R"(<li>(?:<a [^>]*>)?<b>\[([^\]]+)\]</b>)");
  ASSERT_EQ(text_labels.size(), causes.size()) << summary;
  ASSERT_EQ(html_labels.size(), causes.size());
  bool host_late_said = false;
  for (size_t i = 0; i < causes.size(); ++i) {
    EXPECT_EQ(html_labels[i], text_labels[i]) << "cause " << i + 1;
    EXPECT_EQ(causes[i].value("label", ""), text_labels[i]) << "cause " << i + 1;
    // Its detail in the text and its picture's heading on the page say it the same way.
    EXPECT_NE(out.text.find("\n  cause " + std::to_string(i + 1) + " [" + text_labels[i] + "]"),
              std::string::npos)
        << i + 1;
    EXPECT_NE(out.html.find(">" + std::to_string(i + 1) + ". [" + text_labels[i] + "]"),
              std::string::npos)
        << i + 1;
    host_late_said |= text_labels[i] == "host late";
  }
  EXPECT_TRUE(host_late_said) << summary;
}

// Each cause is titled the same in report.txt's CAUSES, report.html's list and report.json.
TEST(VocabularyConsistency, EachCauseHasOneTitleInTextJsonAndHtml) {
  Outputs out = Render();
  const nlohmann::json& causes = out.json["diagnosis"]["causes"];
  ASSERT_GE(causes.size(), 3u) << out.text;
  for (size_t i = 0; i < causes.size(); ++i) {
    const std::string title = causes[i].value("title", "");
    ASSERT_FALSE(title.empty()) << causes[i].dump(1);
    const std::string label = causes[i].value("label", "");
    EXPECT_NE(out.text.find("\n  cause " + std::to_string(i + 1) + " [" + label + "] " + title +
                            "\n"),
              std::string::npos)
        << title << "\n" << out.text;
    EXPECT_NE(out.html.find("<b>[" + label + "]</b> " + EscapeHtml(title)), std::string::npos)
        << title;
  }
}

TEST(VocabularyConsistency, FreezeOneIsTheLongestInTextJsonAndHtml) {
  Outputs out = Render();
  const nlohmann::json& freezes = out.json["diagnosis"]["freezes"];
  ASSERT_EQ(freezes.size(), 2u) << out.text;
  // The earliest freeze is the shorter: numbering by time and by length disagree.
  auto length = [](const nlohmann::json& f) {
    return f["end_ns"].get<uint64_t>() - f["start_ns"].get<uint64_t>();
  };
  ASSERT_LT(length(freezes[0]), length(freezes[1]));
  for (size_t n = 1; n <= 2; ++n) {
    // report.txt: "freeze 1 at +0.070 s, 85.0 ms: ...".
    std::vector<std::string> text =
        All(out.text, "\nfreeze " + std::to_string(n) + " at ([^:]+): ");
    ASSERT_EQ(text.size(), 1u) << out.text;
    // report.html: "Freeze 1: at +0.070 s, 85.0 ms, 2 threads".
    std::vector<std::string> html =
        All(out.html, ">Freeze " + std::to_string(n) + R"(: at ([^,]+, [^,]+),)");
    ASSERT_EQ(html.size(), 1u);
    EXPECT_EQ(html[0], text[0]) << "freeze " << n;
    // report.json: the freeze numbered n is the one the text tells as n.
    const nlohmann::json* numbered = nullptr;
    for (const nlohmann::json& freeze : freezes) {
      if (freeze.value("number", 0u) == n) numbered = &freeze;
    }
    ASSERT_NE(numbered, nullptr) << freezes.dump(1);
    EXPECT_EQ(FormatOffset(out.session, (*numbered)["start_ns"].get<uint64_t>()) + ", " +
                  FormatDuration(length(*numbered)),
              text[0])
        << "freeze " << n;
  }
  // Freeze 1 is the longest, as the SUMMARY says.
  EXPECT_NE(out.text.find("the longest, freeze 1, " + FormatDuration(length(freezes[1]))),
            std::string::npos)
      << out.text;
}

}  // namespace
}  // namespace gprof::collector
