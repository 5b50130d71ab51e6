// Shared by the test binaries: where the build put things, running a program with a timeout and
// capturing its output, temporary directories, and the rule for tests that need BPF.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace gprof::test {

// The build and source trees (env GPROF_BUILD_DIR / GPROF_SOURCE_DIR, else the trees this was
// built from) and what is in them.
std::string BuildDir();
std::string SourceDir();
std::string GprofRunPath();
std::string InjectLibraryPath();
std::string AppPath(const std::string& name);
// The real Perfetto schema, to decode traces with protoc: GPROF_PERFETTO_SCHEMA, else
// ../shared/schemas/perfetto_trace.proto beside the source tree (may not exist: callers skip).
std::string PerfettoSchemaPath();

// A tmpfs of `size` (its size= option: "1m", "900k") mounted at `path` (made if missing) while the
// object lives: a small disk to fill. Needs root; mounted() says whether it is.
class SmallFileSystem {
 public:
  SmallFileSystem(const std::string& path, const std::string& size);
  ~SmallFileSystem();
  SmallFileSystem(const SmallFileSystem&) = delete;
  SmallFileSystem& operator=(const SmallFileSystem&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

// `command` run by /bin/sh; its exit code.
int Shell(const std::string& command);

// A user, its own group and a supplementary one, made for one test and removed with it (needs
// root: useradd, groupadd).
class ThrowawayUser {
 public:
  ThrowawayUser();
  ~ThrowawayUser();
  ThrowawayUser(const ThrowawayUser&) = delete;
  ThrowawayUser& operator=(const ThrowawayUser&) = delete;
  bool ok() const { return uid_ > 0; }
  const std::string& name() const { return name_; }
  unsigned uid() const { return uid_; }
  unsigned gid() const { return gid_; }
  unsigned extra_gid() const { return extra_gid_; }
  // What sudo leaves in the environment of the command it runs as root for this user (Debian's
  // defaults: env_reset, with HOME, USER and LOGNAME those of root).
  std::vector<std::string> SudoEnvironment(const std::string& command = "gprof-run") const;

 private:
  std::string name_, group_, extra_group_;
  unsigned uid_ = 0, gid_ = 0, extra_gid_ = 0;
};

// A fresh directory under /tmp, removed with everything in it when the object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct ProcessResult {
  int wait_status = 0;
  bool timed_out = false;
  std::string out;
  std::string err;
  int exit_code() const;         // the shell's view: 128 + N for a signal, -1 if neither
  double seconds = 0;            // wall time it ran
  uint64_t signalled_at_ns = 0;  // CLOCK_MONOTONIC when `signal` was sent; 0: not sent
};

struct ProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string>
      set_env;  // "NAME=value", added to (or replacing in) the test's environment
  std::vector<std::string> unset_env;  // names removed
  std::string input;                   // written to its stdin, which is then closed
  int timeout_s = 120;
  int signal_after_ms = -1;  // send `signal` this long after the start
  int signal = 0;
  int run_as_uid = -1;  // drop to this uid (and gid) before exec; needs root
  std::string cwd;
};

ProcessResult RunProcess(const ProcessSpec& spec);
// gprof-run with `args`, as `spec` says (its argv is replaced).
ProcessResult RunGprof(std::vector<std::string> args, ProcessSpec spec = {});
// The environment RunProcess gives a command for `spec`: the test's, changed as `spec` says.
std::map<std::string, std::string> EnvironmentFor(const ProcessSpec& spec);

// A spec that only runs `argv`, everything else as the test's own process has it.
inline ProcessSpec Command(std::vector<std::string> argv) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  return spec;
}

std::string ReadFile(const std::string& path);

// What report.txt promises its reader (issue 21), checked with gtest expectations: every line at
// most 160 columns (UTF-8 characters), a SUMMARY of at most 15 lines, and every "cause N" and
// "freeze N" it cites told under its own heading ("  cause N [", "freeze N at ").
void ExpectReadableReport(const std::string& text);

// Tests that need the kernel recorder skip with a reason where BPF cannot run, except under
// GPROF_REQUIRE_BPF=1 (CI), where that is a failure.
bool BpfRequired();
// Empty when this process can load tracing BPF programs: CAP_SYS_ADMIN, or CAP_BPF and
// CAP_PERFMON, in its effective set, and kernel BTF present.
std::string BpfUnavailableReason();

// Skips the test with `reason`, or fails it where CI demands real BPF.
#define GPROF_SKIP_OR_FAIL(reason)                                                   \
  do {                                                                               \
    if (::gprof::test::BpfRequired()) FAIL() << "GPROF_REQUIRE_BPF=1: " << (reason); \
    GTEST_SKIP() << (reason);                                                        \
  } while (0)

#define GPROF_NEED_BPF()                                           \
  do {                                                             \
    std::string gprof_why = ::gprof::test::BpfUnavailableReason(); \
    if (!gprof_why.empty()) GPROF_SKIP_OR_FAIL(gprof_why);         \
  } while (0)

}  // namespace gprof::test
