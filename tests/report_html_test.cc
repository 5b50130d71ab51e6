// report.html: its structure on a hand-built session whose freeze, GPU gap and cause are known,
// and the page in a real browser (headless Chromium): it loads without a network request or a
// console message, and every picture has content.
#include "collector/writers/report_html.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "collector/analysis/analysis.h"
#include "collector/analysis/diagnosis.h"
#include "tests/test_support.h"

namespace gprof::collector {
namespace {

constexpr uint32_t kPid = 100;
constexpr uint32_t kHolder = 10;
constexpr uint64_t kLock = 0x7f0000001000;
constexpr int32_t kFutexStack = 1;
constexpr uint64_t kMs = 1'000'000;
constexpr char kKernel[] = "void gemm<float, 128>(float const*, int) [clone .constprop.0]";
constexpr char kOddName[] = "<img src=x onerror=alert(1)>";

// Three waiters queue on one mutex that the holder keeps 50 ms on CPU; each passes it on to the
// next. The GPU runs the holder's kernel to 40 ms, then nothing until the first waiter, woken at
// 50 ms, launches its own: a gap the convoy explains.
Session ConvoySession() {
  Session session;
  session.directory = "/tmp/session";
  session.meta.command = {"train", "--steps", "2"};
  session.meta.exit_code = 0;
  session.meta.kernel_recording = true;
  session.meta.start_monotonic_ns = 1;
  session.meta.end_monotonic_ns = 80 * kMs;
  session.kernel_stacks[kFutexStack] = {1, 2, 3, 4};
  session.kernel_symbols = {{1, "__schedule+0x1"},
                            {2, "schedule+0x2"},
                            {3, "futex_wait_queue+0x3"},
                            {4, "futex_wait+0x4"}};
  session.processes[kPid].pid = kPid;
  session.processes[kPid].capture = {CaptureMode::kCupti, 130001, "libcupti.so.13"};
  session.threads[kHolder] = {kPid, kHolder, "holder", 0};
  session.threads[11] = {kPid, 11, "waiter-11", 0};
  session.threads[12] = {kPid, 12, "waiter-12", 0};
  session.threads[13] = {kPid, 13, kOddName, 0};
  session.api_names = {"cudaLaunchKernel"};
  auto call = [&](uint32_t tid, uint64_t enter, uint64_t exit, uint64_t correlation) {
    session.api_calls.push_back({enter, exit, 0, correlation, kPid, tid, 0, 0, 0});
  };
  auto kernel = [&](uint64_t start, uint64_t end, uint64_t correlation) {
    if (session.kernel_names.empty()) session.kernel_names.push_back(kKernel);
    GpuActivity activity;
    activity.pid = kPid;
    activity.stream_id = 7;
    activity.start_ns = start;
    activity.end_ns = end;
    activity.correlation_id = correlation;
    activity.detail = GpuKernel{};
    session.gpu_activities.push_back(activity);
  };
  auto sleep = [&](uint32_t tid, uint64_t start, uint64_t wake, uint32_t waker) {
    OffCpuInterval interval;
    interval.pid = kPid;
    interval.tid = tid;
    interval.start_ns = start;
    interval.wake_ns = wake;
    interval.end_ns = wake + 10000;
    interval.waker_pid = kPid;
    interval.waker_tid = waker;
    interval.waker_comm = session.CommIndex(session.threads[waker].name);
    interval.kstack_id = kFutexStack;
    interval.raw_state = 1;
    session.off_cpu.push_back(interval);
    FutexCall futex;
    futex.pid = kPid;
    futex.tid = tid;
    futex.start_ns = start - 1000;
    futex.end_ns = wake + 11000;
    futex.uaddr = kLock;
    futex.op = 0x80;  // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
    futex.val = 2;    // a contended glibc mutex
    session.futex_calls.push_back(futex);
  };
  call(kHolder, kMs / 10, kMs / 5, 1);
  kernel(kMs / 4, 40 * kMs, 1);
  const uint64_t wakes[] = {50 * kMs, 55 * kMs, 60 * kMs};
  for (uint32_t i = 0; i < 3; ++i) {
    const uint32_t tid = 11 + i;
    call(tid, (1 + i) * kMs - kMs / 2, wakes[i] + kMs / 10, 11 + i);
    sleep(tid, (1 + i) * kMs, wakes[i], i == 0 ? kHolder : tid - 1);
    kernel(wakes[i] + kMs / 5, wakes[i] + 2 * kMs, 11 + i);
  }
  auto by_start = [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; };
  std::sort(session.off_cpu.begin(), session.off_cpu.end(), by_start);
  std::sort(session.futex_calls.begin(), session.futex_calls.end(), by_start);
  std::sort(session.gpu_activities.begin(), session.gpu_activities.end(), by_start);
  std::sort(session.api_calls.begin(), session.api_calls.end(),
            [](const ApiCall& a, const ApiCall& b) { return a.enter_ns < b.enter_ns; });
  return session;
}

struct Rendered {
  Session session;
  Analysis diagnosis;
  std::string html;
};

Rendered RenderConvoy() {
  Rendered out{ConvoySession(), {}, {}};
  out.diagnosis = Analyze(out.session, {});
  out.html = RenderHtmlReport(out.session, out.diagnosis, "report.txt's text <b>as it is</b>\n");
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The <svg> elements of a page, each whole, with the figure each draws.
std::vector<std::pair<std::string, std::string>> Pictures(const std::string& html) {
  std::vector<std::pair<std::string, std::string>> pictures;
  static const std::regex figure_id("data-figure=\"([a-z]+-[0-9]+)\"");
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    size_t end = html.find("</svg>", at);
    if (end == std::string::npos) break;
    std::string svg = html.substr(at, end - at);
    std::smatch match;
    pictures.emplace_back(std::regex_search(svg, match, figure_id) ? match[1].str() : "", svg);
  }
  return pictures;
}

TEST(ReportHtml, HasAPictureOfTheCauseTheFreezeAndTheGapWithTheirThreadsAndGpu) {
  Rendered r = RenderConvoy();
  ASSERT_EQ(r.diagnosis.freezes.size(), 1u);
  ASSERT_FALSE(r.diagnosis.causes.empty());
  ASSERT_FALSE(r.diagnosis.gaps.empty());
  auto pictures = Pictures(r.html);
  std::map<std::string, std::string> by_id(pictures.begin(), pictures.end());
  ASSERT_TRUE(by_id.contains("cause-1")) << r.html;
  ASSERT_TRUE(by_id.contains("freeze-1"));
  ASSERT_TRUE(by_id.contains("gap-1"));
  EXPECT_EQ(pictures.size(), 1 + 1 + r.diagnosis.gaps.size()) << "one per cause, freeze and gap";
  for (const auto& [id, svg] : pictures) {
    // Each picture's heading and words are on the page, beside it.
    EXPECT_NE(r.html.find("<h3 id=\"" + id + "\">"), std::string::npos) << id;
  }

  const std::string& freeze = by_id["freeze-1"];
  // The three waiters and the holder, each a row; the waiters' sleeps in the user lock's colour.
  for (const char* label : {">waiter-11 (11)<", ">waiter-12 (12)<", ">holder (10)<"})
    EXPECT_NE(freeze.find(label), std::string::npos) << label;
  EXPECT_EQ(r.diagnosis.causes[r.diagnosis.freezes[0].cause].wait_class, WaitClass::kUserLock);
  EXPECT_GE(Count(freeze, "class=\"w-lock\""), 3u);
  EXPECT_GE(Count(freeze, "class=\"run\""), 4u) << "each thread's running time";
  EXPECT_GE(Count(freeze, "class=\"call\""), 3u) << "the waiters' cudaLaunchKernel";
  // Arrows from each waiter to the thread that released it: 11 -> holder, 12 -> 11, 13 -> 12.
  EXPECT_EQ(Count(freeze, "<line class=\"arrow\""), 3u);
  for (const char* arrow : {"waiter-11 (11) waited for holder (10)",
                            "waiter-12 (12) waited for waiter-11 (11)"})
    EXPECT_NE(freeze.find(arrow), std::string::npos) << arrow;
  // The GPU lane: busy, idle, and the gap outlined.
  for (const std::string& id : {std::string("freeze-1"), std::string("gap-1")}) {
    EXPECT_NE(by_id[id].find(">GPU 0<"), std::string::npos) << id;
    EXPECT_NE(by_id[id].find("class=\"busy\""), std::string::npos) << id;
    EXPECT_NE(by_id[id].find("class=\"idle\""), std::string::npos) << id;
    EXPECT_NE(by_id[id].find("class=\"gap\""), std::string::npos) << id;
  }
  // The gap's words name the thread the GPU waited for.
  size_t gap_words = r.html.find("<h3 id=\"gap-1\">");
  ASSERT_NE(gap_words, std::string::npos);
  EXPECT_NE(r.html.find("the GPU waited for &quot;waiter-11&quot; (11)", gap_words), std::string::npos)
      << r.html.substr(gap_words, 2000);
}

TEST(ReportHtml, LoadsNothingRunsNothingAndEscapesEveryName) {
  Rendered r = RenderConvoy();
  ASSERT_TRUE(r.html.starts_with("<!DOCTYPE html>"));
  // The policy comes before anything that could load.
  size_t policy = r.html.find(
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'\">");
  ASSERT_NE(policy, std::string::npos);
  EXPECT_LT(policy, r.html.find("<style>"));
  EXPECT_EQ(r.html.find("<script"), std::string::npos);
  // No element that loads (the only "<" on the page are its own tags: names are escaped).
  EXPECT_FALSE(std::regex_search(r.html, std::regex("<[a-z]+[^>]*\\s(src|srcset|data)=")));
  for (const char* tag : {"<img", "<iframe", "<object", "<embed", "<video", "<audio", "<base"})
    EXPECT_EQ(r.html.find(tag), std::string::npos) << tag;
  EXPECT_EQ(r.html.find("<link"), std::string::npos);
  EXPECT_EQ(r.html.find("@import"), std::string::npos);
  for (size_t at = r.html.find("url("); at != std::string::npos; at = r.html.find("url(", at + 1))
    EXPECT_EQ(r.html.compare(at, 10, "url(#head-"), 0) << "only the page's own arrowheads";
  for (size_t at = r.html.find("href=\""); at != std::string::npos;
       at = r.html.find("href=\"", at + 1))
    EXPECT_EQ(r.html[at + 6], '#') << "only links within the page";
  // A thread named like markup is text on the page, everywhere it is named.
  EXPECT_EQ(r.html.find(kOddName), std::string::npos);
  EXPECT_NE(r.html.find("&lt;img src=x onerror=alert(1)&gt; (13)"), std::string::npos);
  EXPECT_NE(r.html.find("report.txt&#39;s text &lt;b&gt;as it is&lt;/b&gt;"), std::string::npos);
}

TEST(ReportHtml, TablesGiveEachCallAndKernelNameItsCountTotalMedianAndMax) {
  Rendered r = RenderConvoy();
  size_t api = r.html.find("<h2 id=\"api\">");
  size_t kernels = r.html.find("<h2 id=\"kernels\">");
  ASSERT_NE(api, std::string::npos);
  ASSERT_NE(kernels, std::string::npos);
  // 4 calls: 0.1 ms, and the waiters' 49.6, 53.6 and 57.6 ms (the median of an even count is the
  // lower middle one, as report.txt's table has it); asleep in the slow ones 49 + 53 + 57 ms.
  EXPECT_NE(r.html.find("cudaLaunchKernel</td><td class=\"n\">4</td><td class=\"n\">160.9 ms</td>"
                        "<td class=\"n\">49.6 ms</td><td class=\"n\">57.6 ms</td>"
                        "<td class=\"n\">159.0 ms</td>",
                        api),
            std::string::npos)
      << r.html.substr(api, 800);
  // The kernel's name shortened for reading, whole in its title.
  EXPECT_NE(r.html.find("title=\"void gemm&lt;float, 128&gt;(float const*, int) [clone "
                        ".constprop.0]\">gemm&lt;float, 128&gt;</td><td class=\"n\">4</td>",
                        kernels),
            std::string::npos)
      << r.html.substr(kernels, 800);
}

TEST(ReportHtml, WithoutAGpuOrAnyCauseThePageSaysSoAndDrawsNoEmptyPicture) {
  Session session = ConvoySession();
  session.gpu_activities.clear();
  session.off_cpu.clear();
  session.futex_calls.clear();
  Analysis diagnosis = Analyze(session, {});
  std::string html = RenderHtmlReport(session, diagnosis, "");
  EXPECT_NE(html.find("No contention"), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("GPU idle"), std::string::npos) << "no GPU words where no GPU ran";
  EXPECT_EQ(html.find("<h2 id=\"kernels\">"), std::string::npos);
}

// A cause with no wait to picture (too few CPUs) is pictured around its longest time ready to
// run; a thread of another time is no row of it.
TEST(ReportHtml, TooFewCpusIsPicturedWhereAThreadWaitedLongestForOne) {
  Session session = ConvoySession();
  session.gpu_activities.clear();
  session.off_cpu.clear();
  session.futex_calls.clear();
  session.threads[40] = {kPid, 40, "gone-before", 0};
  session.threads[40].exit_ns = 8 * kMs;
  OffCpuInterval early;
  early.pid = kPid;
  early.tid = 40;
  early.start_ns = kMs;
  early.end_ns = 7 * kMs;
  session.off_cpu.push_back(early);
  for (uint32_t tid : {11u, 12u}) {
    for (uint64_t at = 0; at < 5; ++at) {
      OffCpuInterval preempted;
      preempted.pid = kPid;
      preempted.tid = tid;
      preempted.start_ns = (10 + 12 * at) * kMs + tid * 1000;
      preempted.end_ns = preempted.start_ns + (tid == 12 && at == 3 ? 9 : 6) * kMs;
      session.off_cpu.push_back(preempted);
    }
  }
  std::sort(session.off_cpu.begin(), session.off_cpu.end(),
            [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  Analysis diagnosis = Analyze(session, {});
  ASSERT_FALSE(diagnosis.causes.empty());
  ASSERT_EQ(diagnosis.causes[0].wait_class, WaitClass::kCpu);
  std::string html = RenderHtmlReport(session, diagnosis, "");
  auto pictures = Pictures(html);
  ASSERT_EQ(pictures.size(), 1u);
  EXPECT_EQ(pictures[0].first, "cause-1");
  const std::string& svg = pictures[0].second;
  EXPECT_GE(Count(svg, "class=\"w-cpu\""), 1u);
  EXPECT_NE(svg.find(">waiter-12 (12)<"), std::string::npos);
  EXPECT_EQ(svg.find("gone-before"), std::string::npos) << "it had exited";
  EXPECT_NE(html.find("the longest time one of them waited for a CPU, at +0.046 s, 9.0 ms"),
            std::string::npos);
  EXPECT_EQ(html.find("GPU"), std::string::npos) << "no GPU words where no GPU ran";
}

// --- In a browser ---------------------------------------------------------------------------

// GPROF_CHROMIUM names another; one that is not there is a missing browser.
std::string FindChromium() {
  if (const char* path = getenv("GPROF_CHROMIUM"); path != nullptr && *path != '\0')
    return access(path, X_OK) == 0 ? path : "";
  for (const char* path : {"/usr/bin/chromium", "/usr/bin/chromium-browser"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

struct PageLoad {
  bool ran = false;
  std::string dom;                    // as the browser parsed it
  std::vector<std::string> console;   // console messages: script errors, refused loads
  std::vector<std::string> requests;  // URLs the page asked the network for
  std::string failure;
};

// Loads `page` in headless Chromium, once for its DOM and once for a screenshot at `screenshot`
// (when not empty). Console messages come in Chromium's log; every network request is in its
// net log, where the page's own (from a file:// page, initiator "null") are told from Chromium's
// background ones (initiator "not an origin").
PageLoad LoadPage(const std::string& chromium, const std::string& page, const test::TempDir& dir,
                  const std::string& screenshot = "") {
  PageLoad load;
  const std::string net_log = dir.Sub("netlog.json");
  unlink(net_log.c_str());
  std::vector<std::string> argv = {chromium,
                                   "--headless",
                                   "--no-sandbox",  // the tests run as root
                                   "--disable-gpu",
                                   "--disable-dev-shm-usage",  // a container's /dev/shm is small
                                   "--no-first-run",
                                   "--disable-background-networking",
                                   "--user-data-dir=" + dir.Sub("profile"),
                                   "--enable-logging=stderr",
                                   "--v=0",
                                   "--log-net-log=" + net_log,
                                   "--host-resolver-rules=MAP * ~NOTFOUND",
                                   "--dump-dom",
                                   "file://" + page};
  test::ProcessSpec spec = test::Command(argv);
  spec.timeout_s = 90;
  test::ProcessResult result = test::RunProcess(spec);
  if (result.timed_out || result.exit_code() != 0) {
    load.failure = "chromium failed (exit " + std::to_string(result.exit_code()) + "): " + result.err;
    return load;
  }
  load.ran = true;
  load.dom = result.out;
  static const std::regex console_line("CONSOLE[^\\]]*\\] (.*)");
  std::smatch match;
  std::string err = result.err;
  for (auto it = std::sregex_iterator(err.begin(), err.end(), console_line);
       it != std::sregex_iterator(); ++it)
    load.console.push_back((*it)[1].str());
  auto log = nlohmann::json::parse(test::ReadFile(net_log), nullptr, false);
  if (log.is_discarded() || !log.contains("events")) {
    load.failure = "no net log from chromium";
    load.ran = false;
    return load;
  }
  for (const auto& event : log["events"]) {
    if (!event.contains("params")) continue;
    const auto& params = event["params"];
    if (!params.contains("url") || !params.contains("initiator")) continue;
    if (params["initiator"] == "not an origin") continue;  // Chromium's own
    load.requests.push_back(params["url"].get<std::string>());
  }
  if (!screenshot.empty()) {
    test::ProcessSpec shot = test::Command(
        {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run",
         "--disable-background-networking", "--user-data-dir=" + dir.Sub("profile"),
         "--hide-scrollbars", "--window-size=1400,2400", "--screenshot=" + screenshot,
         "file://" + page});
    shot.timeout_s = 90;
    test::ProcessResult taken = test::RunProcess(shot);
    if (taken.timed_out || taken.exit_code() != 0) load.failure = "no screenshot: " + taken.err;
  }
  return load;
}

#define NEED_CHROMIUM(chromium)                                                           \
  std::string chromium = FindChromium();                                                  \
  if (chromium.empty()) {                                                                 \
    GPROF_SKIP_OR_FAIL("chromium is not installed (scripts/setup.sh installs it): the "   \
                       "browser test of report.html cannot run");                         \
  }

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The harness sees what it is there to see: a script error, a load the policy refused, and a
// request from a page without the policy.
TEST(ReportHtmlBrowser, TheHarnessSeesScriptErrorsRefusedLoadsAndRequests) {
  NEED_CHROMIUM(chromium);
  test::TempDir dir;
  const std::string policy =
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; script-src "
      "'unsafe-inline'\">";
  WriteFile(dir.Sub("bad.html"), "<!DOCTYPE html><html><head>" + policy +
                                     "</head><body><img src=\"http://gprof.invalid/a.png\">"
                                     "<script>no_such_function();</script></body></html>");
  WriteFile(dir.Sub("open.html"),
            "<!DOCTYPE html><html><body><img src=\"http://gprof.invalid/b.png\"></body></html>");
  PageLoad bad = LoadPage(chromium, dir.Sub("bad.html"), dir);
  ASSERT_TRUE(bad.ran) << bad.failure;
  std::string console;
  for (const std::string& line : bad.console) console += line + "\n";
  EXPECT_NE(console.find("no_such_function is not defined"), std::string::npos) << console;
  EXPECT_NE(console.find("Content Security Policy"), std::string::npos) << console;
  PageLoad open = LoadPage(chromium, dir.Sub("open.html"), dir);
  ASSERT_TRUE(open.ran) << open.failure;
  EXPECT_NE(std::find(open.requests.begin(), open.requests.end(), "http://gprof.invalid/b.png"),
            open.requests.end());
}

TEST(ReportHtmlBrowser, TheReportLoadsWithoutARequestOrAnErrorAndEveryPictureHasContent) {
  NEED_CHROMIUM(chromium);
  test::TempDir dir;
  Rendered r = RenderConvoy();
  const std::string page = dir.Sub("report.html");
  WriteFile(page, r.html);
  PageLoad load = LoadPage(chromium, page, dir, dir.Sub("report.png"));
  ASSERT_TRUE(load.ran) << load.failure;
  EXPECT_TRUE(load.failure.empty()) << load.failure;
  for (const std::string& line : load.console) ADD_FAILURE() << "console: " << line;
  for (const std::string& url : load.requests) ADD_FAILURE() << "request: " << url;
  // The browser parsed every picture as SVG with what was drawn in it: rows, lanes and labels.
  auto written = Pictures(r.html);
  auto parsed = Pictures(load.dom);
  ASSERT_EQ(parsed.size(), written.size());
  ASSERT_GE(parsed.size(), 3u);
  for (const auto& [id, svg] : parsed) {
    EXPECT_GE(Count(svg, "<rect class=\"run\""), 1u) << id;
    EXPECT_GE(Count(svg, "<rect class=\"w-"), 1u) << id << ": a wait";
    EXPECT_GE(Count(svg, "<rect class=\"busy\""), 1u) << id << ": the GPU";
    EXPECT_GE(Count(svg, "<text class=\"label\""), 2u) << id;
    EXPECT_GE(Count(svg, "<text class=\"tick\""), 2u) << id << ": a time axis";
  }
  // The screenshot is a picture of the page (a PNG much larger than a blank one).
  std::string png = test::ReadFile(dir.Sub("report.png"));
  ASSERT_GE(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(png.size(), 40'000u);
  if (const char* keep = getenv("GPROF_REPORT_HTML_SCREENSHOT"); keep != nullptr && *keep != '\0')
    WriteFile(keep, png);
}

}  // namespace
}  // namespace gprof::collector
