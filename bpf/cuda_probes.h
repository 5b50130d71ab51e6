// CUDA driver calls without the injected library (gprof-run -p): finds the libcuda each process of
// the tree maps (its /proc/PID/maps snapshots), reads its exported cu* functions from the ELF
// dynamic symbol table, and attaches a uprobe and a uretprobe to each (bpf/cuda_probes.bpf.h) for
// that process only: other processes that map the same libcuda (another user's job) take no trap.
#pragma once

#include <bpf/libbpf.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace gprof::bpf {

// BPF_TRACE_UPROBE_MULTI of linux/bpf.h since 6.6 (the build's headers may be older): a program
// loaded for it is attached to many offsets of one binary by one link.
constexpr bpf_attach_type kAttachUprobeMulti = static_cast<bpf_attach_type>(48);

// Whether the running kernel makes uprobe_multi links (6.6 and later). One link per binary is
// removed with one wait for RCU, where a uprobe each waits once per probe (about 100 ms on these
// kernels: minutes for a libcuda's).
bool KernelHasUprobeMulti();

class CudaProbes {
 public:
  // `enter`/`exit`: the programs; `names_fd`: the cuda_probe_names map; `multi`: the programs
  // were loaded for uprobe_multi links; `links`/`link_fds`: where the attached links go
  // (detached with the recorder's others); `note`: a line for the session.
  CudaProbes(bpf_program* enter, bpf_program* exit, int names_fd, bool multi,
             std::vector<bpf_link*>* links, std::vector<int>* link_fds,
             std::function<void(const std::string&)> note)
      : enter_(enter),
        exit_(exit),
        names_fd_(names_fd),
        multi_(multi),
        links_(links),
        link_fds_(link_fds),
        note_(std::move(note)) {}

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
  // Attaches `program` to every entry point of the binary open as `binary` in process `pid`, one
  // link per entry point (and direction); returns how many attached and the first error.
  size_t AttachEach(bpf_program* program, bool retprobe, uint32_t pid, const std::string& binary,
                    const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies,
                    int* first_error);
  // The same with one uprobe_multi link: all or none.
  size_t AttachMulti(bpf_program* program, bool retprobe, uint32_t pid, const std::string& binary,
                     const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies,
                     int* first_error);

  bpf_program* enter_;
  bpf_program* exit_;
  int names_fd_;
  bool multi_;
  std::vector<bpf_link*>* links_;
  std::vector<int>* link_fds_;
  std::function<void(const std::string&)> note_;
  // (process, binary's device, inode) probed; a pid reused by another process is probed anew
  // only if it maps another binary (its probes of the first still filter to its pid).
  std::set<std::tuple<uint32_t, dev_t, ino_t>> probed_;
  std::map<std::string, uint32_t> function_index_;
  std::set<uint32_t> unreadable_;  // processes whose libcuda could not be opened (said once)
};

}  // namespace gprof::bpf
