// The merged report.html's picture of the ranks' collectives (issue 37): a job of three gloo
// ranks recorded one session per rank, rank 2 sleeping before each all_reduce, merged; the page,
// loaded in headless Chromium, draws each collective with the late rank's lateness and every
// wait in it, whose and for whom as report.json says, the longest as long as the lateness.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace gprof::test {
namespace {

std::string FindChromium() {
  if (const char* path = getenv("GPROF_CHROMIUM"); path != nullptr && *path != '\0')
    return access(path, X_OK) == 0 ? path : "";
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (access(path, X_OK) == 0) return path;
  return "";
}

// The page as the browser parsed it.
std::string RenderedDom(const std::string& chromium, const std::string& page, const TempDir& dir) {
  ProcessSpec spec = Command(
      {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
       "--no-first-run", "--disable-background-networking", "--user-data-dir=" + dir.Sub("profile"),
       "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", "file://" + page});
  spec.timeout_s = 90;
  ProcessResult result = RunProcess(spec);
  EXPECT_EQ(result.exit_code(), 0) << result.err;
  return result.out;
}

TEST(MergedHtml, ThePageDrawsEachCollectivesLateRankAndWaits) {
  GPROF_NEED_BPF();
  const std::string chromium = FindChromium();
  if (chromium.empty())
    GPROF_SKIP_OR_FAIL("chromium is not installed (scripts/setup.sh installs it)");
  TempDir dir;
  ProcessSpec launch =
      Command({"/usr/bin/python3", SourceDir() + "/tests/apps/ranks/straggler_ranks.py", "launch",
               "--world", "3", "--late", "2", "--mode", "sleep", "--prefix", GprofRunPath(), "-q",
               "-o", dir.Sub("r%q{RANK}"), "--"});
  launch.timeout_s = 180;
  ProcessResult ran = RunProcess(launch);
  ASSERT_EQ(ran.exit_code(), 0) << ran.out << ran.err;
  ProcessResult merged = RunProcess(Command({GprofRunPath(), "merge", "-o", dir.Sub("job"),
                                             dir.Sub("r0"), dir.Sub("r1"), dir.Sub("r2")}));
  ASSERT_EQ(merged.exit_code(), 0) << merged.err;
  nlohmann::json report = nlohmann::json::parse(ReadFile(dir.Sub("job/report.json")));
  const nlohmann::json& collectives = report["ranks"]["collectives"];
  ASSERT_GE(collectives.size(), 3u) << report["ranks"].dump(1);

  const std::string dom = RenderedDom(chromium, dir.Sub("job/report.html"), dir);
  ASSERT_NE(dom.find("<svg"), std::string::npos) << dom.substr(0, 2000);
  // Each collective drawn: its late rank as the report names it, a red bar for its lateness and
  // a bar per waiting rank; the longest wait's bar as long as the lateness (the same figure).
  static const std::regex group("<g class=\"collective\" data-late-rank=\"(\\d+)\">(.*?)</g>");
  static const std::regex late_bar("<rect class=\"late\"[^>]* width=\"(\\d+)\"");
  static const std::regex wait_bar(
      "<rect class=\"wait\" data-rank=\"(\\d+)\"[^>]* width=\"(\\d+)\"[^>]*><title>(rank \\d+ "
      "waited [^<]* for rank (\\d+))</title>");
  size_t drawn = 0;
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), group); it != std::sregex_iterator();
       ++it, ++drawn) {
    ASSERT_LT(drawn, collectives.size());
    const nlohmann::json& collective = collectives[drawn];
    EXPECT_EQ(std::stoi((*it)[1].str()), collective["late_rank"].get<int>());
    const std::string body = (*it)[2].str();
    std::smatch late;
    ASSERT_TRUE(std::regex_search(body, late, late_bar)) << body;
    const int late_width = std::stoi(late[1].str());
    EXPECT_GT(late_width, 0);
    int longest = 0;
    size_t waits = 0;
    // The collective's waits in the report's order (the longest first): each bar says whose
    // wait it is and for whom (a rank may wait for another than the last to arrive meanwhile).
    for (auto bar = std::sregex_iterator(body.begin(), body.end(), wait_bar);
         bar != std::sregex_iterator(); ++bar, ++waits) {
      ASSERT_LT(waits, collective["waits"].size()) << body;
      const nlohmann::json& wait =
          report["ranks"]["waits"][collective["waits"][waits].get<size_t>()];
      EXPECT_EQ(std::stoi((*bar)[1].str()), wait["waiting_rank"].get<int>()) << body;
      EXPECT_EQ(std::stoi((*bar)[4].str()), wait["late_rank"].get<int>()) << body;
      longest = std::max(longest, std::stoi((*bar)[2].str()));
    }
    EXPECT_EQ(waits, collective["waits"].size()) << body;
    EXPECT_NEAR(longest, late_width, 1) << body;
  }
  EXPECT_EQ(drawn, std::min<size_t>(collectives.size(), 12));
}

}  // namespace
}  // namespace gprof::test
