// The kernel's verifier accepts every program with room to spare. A program that passes today at
// a tenth of the verifier's million-instruction budget can fail on the next kernel build: on the
// Linux 6.18 build of 2026-12-04, sys_enter's fd scan (a loop inlined in a bpf_loop step) took
// the whole budget, 24 s of system time, and then the whole recorder was off. This catches a
// program that grows towards the limit before a user's kernel does.
#include <bpf/libbpf.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bpf/kernel_events.skel.h"
#include "tests/test_support.h"

namespace {

// The verifier's budget of instructions processed per program (BPF_COMPLEXITY_LIMIT_INSNS).
constexpr long kVerifierLimit = 1000000;
// What a program may use of it here: a kernel whose verifier explores several times more states
// than this one must still load it.
constexpr long kMargin = 10;

long ProcessedInstructions(const std::string& log) {
  size_t at = log.rfind("processed ");
  if (at == std::string::npos) return -1;
  return std::strtol(log.c_str() + at + strlen("processed "), nullptr, 10);
}

TEST(BpfVerifier, EveryProgramLoadsWellUnderTheVerifiersBudget) {
  GPROF_NEED_BPF();
  // Quiet while it loads (the logs are read below), and as before after: the recorder's tests in
  // this binary read libbpf's warnings through their own print function.
  struct QuietLibbpf {
    libbpf_print_fn_t before =
        libbpf_set_print([](libbpf_print_level, const char*, va_list) { return 0; });
    ~QuietLibbpf() { libbpf_set_print(before); }
  } quiet;
  kernel_events_bpf* skel = kernel_events_bpf__open();
  ASSERT_NE(skel, nullptr) << "open the BPF object: " << strerror(errno);
  std::unique_ptr<kernel_events_bpf, void (*)(kernel_events_bpf*)> closer(
      skel, kernel_events_bpf__destroy);
  // Every part on, as the largest recording loads them: the Python walker is compiled out of
  // every program when capture_python is 0.
  skel->rodata->capture_python = 1;
  skel->rodata->capture_stacks = 1;
  skel->rodata->capture_user_stacks = 1;

  // Each program's statistics (log level 4) in a log of its own; all programs at once, the raw
  // tracepoint fallbacks included.
  std::map<std::string, std::vector<char>> logs;
  bpf_program* program = nullptr;
  bpf_object__for_each_program(program, skel->obj) {
    std::vector<char>& log = logs[bpf_program__name(program)];
    log.assign(1 << 16, '\0');
    bpf_program__set_autoload(program, true);
    bpf_program__set_log_level(program, 4);
    bpf_program__set_log_buf(program, log.data(), log.size());
  }
  int rc = kernel_events_bpf__load(skel);
  for (const auto& [name, log] : logs) {
    std::string text(log.data());
    long processed = ProcessedInstructions(text);
    if (rc != 0 && processed < 0) continue;  // not reached before the failure
    EXPECT_GE(processed, 0) << name << ": no verifier statistics in its log:\n" << text;
    EXPECT_LT(processed, kVerifierLimit / kMargin)
        << name << " took " << processed << " of the verifier's " << kVerifierLimit
        << " instructions:\n"
        << text;
  }
  ASSERT_EQ(rc, 0) << "load the BPF object: " << strerror(-rc);
}

}  // namespace
