// identity_app: says who it runs as, for the tests of gprof-run under sudo. Prints
//   uid U / gid G / groups G1 G2 ... (sorted) / umask M (octal)
// one per line, then "environ", a newline and every entry of its environment, each ended by a NUL.
// Then it makes a few CUDA calls, and so does a child it forks (without exec), so that the
// injected library writes files as this user from two processes. Exit 0; a failed call: exit 1.
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/apps/app_common.h"

extern char** environ;

namespace {

void MakeAFewCudaCalls() {
  int devices = 0;
  apps::Check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  apps::Check(fake_cuda::LaunchKernel(100, nullptr), "cudaLaunchKernel");
  apps::Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace

int main() {
  std::vector<gid_t> groups(static_cast<size_t>(std::max(getgroups(0, nullptr), 0)));
  if (getgroups(static_cast<int>(groups.size()), groups.data()) < 0) return 1;
  std::sort(groups.begin(), groups.end());
  mode_t mask = umask(0);
  umask(mask);
  std::string text =
      "uid " + std::to_string(getuid()) + "\ngid " + std::to_string(getgid()) + "\ngroups";
  for (gid_t group : groups) text += " " + std::to_string(group);
  char mask_text[16];
  std::snprintf(mask_text, sizeof(mask_text), "%03o", static_cast<unsigned>(mask));
  text += std::string("\numask ") + mask_text + "\nenviron\n";
  for (char** entry = environ; *entry != nullptr; ++entry) {
    text += *entry;
    text.push_back('\0');
  }
  if (fwrite(text.data(), 1, text.size(), stdout) != text.size() || fflush(stdout) != 0) return 1;

  MakeAFewCudaCalls();
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    MakeAFewCudaCalls();
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return 1;
  return 0;
}
