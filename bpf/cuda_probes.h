// CUDA driver calls without the injected library (gprof-run -p): finds the libcuda each process of
// the tree maps (its /proc/PID/maps snapshots), reads its exported cu* functions from the ELF
// dynamic symbol table, and attaches a uprobe and a uretprobe to each (bpf/cuda_probes.bpf.h) for
// that process only: other processes that map the same libcuda (another user's job) take no trap.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

struct bpf_link;
struct bpf_program;

namespace gprof::bpf {

class CudaProbes {
 public:
  // `enter`/`exit`: the programs; `names_fd`: the cuda_probe_names map; `links`: where the
  // attached links go (detached with the recorder's others); `note`: a line for the session.
  CudaProbes(bpf_program* enter, bpf_program* exit, int names_fd, std::vector<bpf_link*>* links,
             std::function<void(const std::string&)> note)
      : enter_(enter), exit_(exit), names_fd_(names_fd), links_(links), note_(std::move(note)) {}

  // A /proc/PID/maps snapshot of a process of the tree: probes a libcuda it maps that is not
  // probed yet.
  void OnMaps(uint32_t pid, const std::string& maps_text);

  // The entry points probed, over every binary.
  size_t functions() const { return function_index_.size(); }

 private:
  // Probes the libcuda mapped at `range` ("start-end") of process `pid`: the file of that maps
  // line (`device` "major:minor" in hex, `inode`), known by `path`.
  void Probe(uint32_t pid, const std::string& range, const std::string& device, uint64_t inode,
             const std::string& path);
  // The cookie of `name`: its index into cuda_probe_names, given at its first binary; -1 once the
  // map is full.
  int64_t IndexOf(const std::string& name);

  bpf_program* enter_;
  bpf_program* exit_;
  int names_fd_;
  std::vector<bpf_link*>* links_;
  std::function<void(const std::string&)> note_;
  // (process, binary's device, inode) probed; a pid reused by another process is probed anew
  // only if it maps another binary (its probes of the first still filter to its pid).
  std::set<std::tuple<uint32_t, dev_t, ino_t>> probed_;
  std::map<std::string, uint32_t> function_index_;
  std::set<uint32_t> unreadable_;  // processes whose libcuda could not be opened (said once)
};

}  // namespace gprof::bpf
