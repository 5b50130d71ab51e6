#include "collector/live/dump_analysis.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "collector/symbols/user_symbols.h"

namespace gprof::collector::live {

WaitKey WaitKeyOf(const ThreadSnapshot& thread) {
  WaitKey key;
  if (thread.running) {
    key.syscall = -2;
    return key;
  }
  if (!thread.in_syscall) {
    key.state = thread.state;
    return key;
  }
  key.syscall = thread.syscall;
  if (thread.syscall == kFutexSystemCall) {
    key.pid = thread.pid;
    key.address = thread.lock_address != 0 ? thread.lock_address : thread.args[0];
    key.object = thread.lock_name;
    return key;
  }
  key.object = thread.object;
  return key;
}

namespace {

std::vector<WaitGroup> GroupThreads(const Snapshot& snapshot) {
  std::map<WaitKey, WaitGroup> groups;
  for (const ProcessSnapshot& process : snapshot.processes) {
    for (const ThreadSnapshot& thread : process.threads) {
      WaitKey key = WaitKeyOf(thread);
      WaitGroup& group = groups[key];
      group.key = key;
      if (group.threads.empty()) {
        group.holder = thread.holder;
        group.holder_source = thread.holder_source;
      } else if (group.holder != thread.holder) {
        group.holder = 0;
        group.holder_source = HolderSource::kNone;
      }
      group.threads.push_back(&thread);
    }
  }
  std::vector<WaitGroup> ordered;
  for (auto& [key, group] : groups) ordered.push_back(std::move(group));
  std::stable_sort(ordered.begin(), ordered.end(), [](const WaitGroup& a, const WaitGroup& b) {
    return a.threads.size() > b.threads.size();
  });
  return ordered;
}

// Where a thread is, comparable across processes of one program: its system call and frames.
std::string Place(const Snapshot& snapshot, const ThreadSnapshot& thread) {
  std::string place = thread.running ? "running" : std::to_string(thread.syscall);
  const std::vector<uint64_t>& ips = thread.native_stack.ips;
  for (size_t i = 0; i < ips.size(); ++i) {
    AddressUse use = i == 0 ? AddressUse::kInstruction : AddressUse::kReturnAddress;
    place += "|" + FrameText(LocateUserAddress(snapshot.maps, static_cast<uint32_t>(thread.pid),
                                               ips[i], kLatest, use),
                             ips[i]);
  }
  for (const PythonFrameLine& frame : thread.python_stack)
    place += "|" + frame.file + ":" + std::to_string(frame.line);
  return place;
}

// Each requested process's threads (its descendants' too), by (name, place among that name's).
std::vector<OddThread> FindOddThreads(const Snapshot& snapshot) {
  std::vector<OddThread> odd;
  if (snapshot.requested.size() < 3) return odd;  // with two, neither is the odd one
  std::map<pid_t, pid_t> root_of;                 // process -> the requested process above it
  for (const ProcessSnapshot& process : snapshot.processes) {
    bool requested = std::find(snapshot.requested.begin(), snapshot.requested.end(), process.pid) !=
                     snapshot.requested.end();
    auto parent = root_of.find(process.ppid);
    root_of[process.pid] = requested || parent == root_of.end() ? process.pid : parent->second;
  }
  // (name, index) -> root -> the thread
  std::map<std::pair<std::string, size_t>, std::map<pid_t, const ThreadSnapshot*>> roles;
  std::map<std::pair<pid_t, std::string>, size_t> seen;
  for (const ProcessSnapshot& process : snapshot.processes) {
    pid_t root = root_of[process.pid];
    for (const ThreadSnapshot& thread : process.threads) {
      size_t index = seen[{root, thread.name}]++;
      roles[{thread.name, index}][root] = &thread;
    }
  }
  for (const auto& [role, by_root] : roles) {
    if (by_root.size() < 3) continue;
    std::map<std::string, std::vector<std::pair<pid_t, const ThreadSnapshot*>>> by_place;
    for (const auto& [root, thread] : by_root)
      by_place[Place(snapshot, *thread)].emplace_back(root, thread);
    if (by_place.size() < 2) continue;
    auto usual = std::max_element(by_place.begin(), by_place.end(), [](auto& a, auto& b) {
      return a.second.size() < b.second.size();
    });
    if (usual->second.size() * 2 <= by_root.size()) continue;  // no majority: no odd one
    for (const auto& [place, threads] : by_place) {
      if (&place == &usual->first) continue;
      for (const auto& [root, thread] : threads)
        odd.push_back(OddThread{root, thread, usual->second.front().second, usual->second.size()});
    }
  }
  std::stable_sort(odd.begin(), odd.end(),
                   [](const OddThread& a, const OddThread& b) { return a.process < b.process; });
  return odd;
}

}  // namespace

DumpAnalysis AnalyzeDump(const Snapshot& snapshot) {
  DumpAnalysis analysis;
  analysis.groups = GroupThreads(snapshot);
  analysis.odd_threads = FindOddThreads(snapshot);
  std::map<pid_t, pid_t> holder_of;  // waiter -> holder
  for (const ProcessSnapshot& process : snapshot.processes)
    for (const ThreadSnapshot& thread : process.threads)
      if (thread.holder != 0 && thread.holder != thread.tid) holder_of[thread.tid] = thread.holder;

  std::set<pid_t> holders;
  for (const auto& [waiter, holder] : holder_of) holders.insert(holder);

  // Cycles: follow each thread's holders until a thread without one or a thread seen before.
  std::set<pid_t> in_cycle;
  for (const auto& [start, first_holder] : holder_of) {
    std::vector<pid_t> path{start};
    pid_t next = first_holder;
    while (holder_of.contains(next) && std::find(path.begin(), path.end(), next) == path.end()) {
      path.push_back(next);
      next = holder_of[next];
    }
    auto loop = std::find(path.begin(), path.end(), next);
    if (loop == path.end()) continue;
    std::vector<pid_t> members(loop, path.end());
    std::rotate(members.begin(), std::min_element(members.begin(), members.end()), members.end());
    if (in_cycle.contains(members.front())) continue;
    in_cycle.insert(members.begin(), members.end());
    analysis.deadlocks.push_back(Deadlock{members});
  }

  // Chains: from each waiter that holds nothing others wait for, through its holders, to a root
  // (or into a deadlock); waiters with the same path share one chain.
  std::map<std::vector<pid_t>, std::vector<pid_t>> waiters_of_path;
  for (const auto& [waiter, first_holder] : holder_of) {
    if (holders.contains(waiter) || in_cycle.contains(waiter)) continue;
    std::vector<pid_t> path{first_holder};
    while (holder_of.contains(path.back()) && !in_cycle.contains(path.back()) &&
           path.size() <= holder_of.size())
      path.push_back(holder_of[path.back()]);
    waiters_of_path[path].push_back(waiter);
  }
  for (auto& [path, waiters] : waiters_of_path) analysis.chains.push_back(WaitChain{waiters, path});
  return analysis;
}

}  // namespace gprof::collector::live
