// What the tests of `gprof-run dump` share (dump_test.cc, dump_python_locks_test.cc): a stuck
// program run in the background, dumps repeated until they show what the test waits for, and
// the text's sections, native frames and Python frames picked out.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace gprof::test {

// dump_app in the background: its stdout read line by line until "ready", killed at the end.
class StuckProgram {
 public:
  explicit StuckProgram(std::vector<std::string> args) : StuckProgram(AppPath("dump_app"), args) {}
  StuckProgram(std::string path, std::vector<std::string> args) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      std::vector<char*> argv;
      argv.push_back(path.data());
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
  }
  ~StuckProgram() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }

  // Reads its output until "ready" (or 60 s without it); the lines before it.
  std::string WaitReady() {
    std::string text;
    while (text.find("ready\n") == std::string::npos) {
      pollfd readable{out_, POLLIN, 0};
      if (poll(&readable, 1, 60'000) <= 0) break;
      char buffer[256];
      ssize_t got = read(out_, buffer, sizeof buffer);
      if (got <= 0) break;
      text.append(buffer, static_cast<size_t>(got));
    }
    printed_ += text;
    return text;
  }

  // The number after `label ` in what it printed ("first 1234"), or -1.
  std::vector<int> AllPrinted(const std::string& label) const {
    std::vector<int> values;
    for (size_t at = printed_.find(label + " "); at != std::string::npos;
         at = printed_.find(label + " ", at + 1))
      values.push_back(atoi(printed_.c_str() + at + label.size() + 1));
    return values;
  }
  int Printed(const std::string& label) const {
    size_t at = printed_.find(label + " ");
    return at == std::string::npos ? -1 : atoi(printed_.c_str() + at + label.size() + 1);
  }
  pid_t pid() const { return pid_; }
  // Waits for it to end; its wait status.
  int Wait() {
    int status = -1;
    if (pid_ > 0 && waitpid(pid_, &status, 0) == pid_) pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string printed_;
};

// `gprof-run dump -p PID` until its output holds `expected` (a thread prints before it blocks:
// give it up to 30 s to get there); the last output.
inline ProcessResult DumpUntil(pid_t pid, const std::function<bool(const std::string&)>& settled) {
  ProcessResult result;
  for (int attempt = 0; attempt < 300; ++attempt) {
    result = RunGprof({"dump", "-p", std::to_string(pid)});
    if (result.exit_code() != 0 || settled(result.out)) break;
    usleep(100'000);
  }
  return result;
}

inline ProcessResult DumpUntil(pid_t pid, const std::string& expected) {
  return DumpUntil(pid,
                   [&](const std::string& out) { return out.find(expected) != std::string::npos; });
}

inline std::string LineWith(const std::string& text, const std::string& needle) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line))
    if (line.find(needle) != std::string::npos) return line;
  return "";
}

// The lines the text gives thread `tid` in its group: its name and state, then its stacks, to the
// next thread or group.
inline std::string ThreadSection(const std::string& out, int tid) {
  size_t start = out.find("\n    " + std::to_string(tid) + " (");
  if (start == std::string::npos) start = out.find("the first, " + std::to_string(tid) + " (");
  if (start == std::string::npos) return "";
  std::istringstream lines(out.substr(start + 1));
  std::string line, section;
  while (std::getline(lines, line)) {
    bool next = !section.empty() && line.size() > 4 &&
                ((line.starts_with("    ") && isdigit(static_cast<unsigned char>(line[4]))) ||
                 (line.starts_with("  ") && isdigit(static_cast<unsigned char>(line[2]))) ||
                 !line.starts_with("  "));
    if (next) break;
    section += line + "\n";
  }
  return section;
}

// The frame lines of `section`'s native stack, in order.
inline std::vector<std::string> NativeFrames(const std::string& section) {
  std::vector<std::string> frames;
  size_t start = section.find("native stack (");
  if (start == std::string::npos) return frames;
  std::istringstream lines(section.substr(start));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && line.starts_with("        "))
    frames.push_back(line.substr(8));
  return frames;
}

// Where in `frames` the first frame holding `name` is; frames.size() when none.
inline size_t FrameIndex(const std::vector<std::string>& frames, const std::string& name) {
  for (size_t i = 0; i < frames.size(); ++i)
    if (frames[i].find(name) != std::string::npos) return i;
  return frames.size();
}

// The CPythons to test: Debian's (CI has it), and pyenv's 3.9 to 3.13 where installed.
inline std::vector<std::string> Pythons() {
  std::vector<std::string> found{"/usr/bin/python3"};
  for (const char* version : {"3.9", "3.10", "3.11", "3.12", "3.13"}) {
    ProcessResult ls =
        RunProcess(Command({"/bin/sh", "-c",
                            std::string("ls -d /root/.pyenv/versions/") + version +
                                ".*/bin/python" + version + " 2>/dev/null | tail -1"}));
    std::string path = ls.out.substr(0, ls.out.find('\n'));
    if (!path.empty() && access(path.c_str(), X_OK) == 0) found.push_back(path);
  }
  return found;
}

// The frame lines of `section`'s Python stack, in order.
inline std::vector<std::string> PythonFrames(const std::string& section) {
  std::vector<std::string> frames;
  size_t start = section.find("Python stack:");
  if (start == std::string::npos) return frames;
  std::istringstream lines(section.substr(start));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && line.starts_with("        "))
    frames.push_back(line.substr(8));
  return frames;
}

}  // namespace gprof::test
