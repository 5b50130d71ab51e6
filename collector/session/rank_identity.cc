#include "collector/session/rank_identity.h"

#include <charconv>
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "inject/format/rank_variables.h"

namespace gprof::collector {
namespace {

// A rank or a size: decimal digits only, fitting 32 bits.
std::optional<uint32_t> Number(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  std::string_view digits(text);
  uint32_t value = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

// A process the multiprocessing module started to run a function (its stacks show spawn_main or
// Process._bootstrap), as torch.multiprocessing.spawn starts each rank: not a server and its
// client, whatever they exchange.
bool IsMultiprocessingChild(const Session& session, uint32_t pid) {
  return session.PythonRole(pid).starts_with("multiprocessing child");
}

}  // namespace

std::optional<RankIdentity> RankFromVariables(
    const std::function<const char*(const char*)>& lookup) {
  for (const format::RankVariables& launcher : format::kRankVariables) {
    std::optional<uint32_t> rank = Number(lookup(launcher.rank));
    if (!rank) continue;
    RankIdentity identity;
    identity.rank = rank;
    identity.variable = launcher.rank;
    if (launcher.local_rank != nullptr) identity.local_rank = Number(lookup(launcher.local_rank));
    identity.world_size = Number(lookup(launcher.world_size));
    return identity;
  }
  return std::nullopt;
}

std::optional<RankIdentity> RankFromVariableText(std::string_view text) {
  std::map<std::string, std::string, std::less<>> values;
  while (!text.empty()) {
    size_t end = text.find('\0');
    std::string_view entry = text.substr(0, end);
    size_t equals = entry.find('=');
    if (equals != std::string_view::npos)
      values[std::string(entry.substr(0, equals))] = std::string(entry.substr(equals + 1));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return RankFromVariables([&](const char* name) -> const char* {
    auto value = values.find(std::string_view(name));
    return value == values.end() ? nullptr : value->second.c_str();
  });
}

void InheritRanks(Session* session) {
  constexpr int kGenerations = 64;
  // Whose identity each process has: its own (read, or the command's from session.json), or the
  // nearest such ancestor's.
  auto own = [&](const Process& process) -> std::optional<std::optional<RankIdentity>> {
    if (process.environment_read_ns != 0) return process.rank;
    if (process.pid == session->meta.root_pid && session->meta.known) return session->meta.rank;
    return std::nullopt;
  };
  std::map<uint32_t, std::optional<RankIdentity>> found;
  for (auto& [pid, process] : session->processes) {
    const Process* at = &process;
    std::optional<std::optional<RankIdentity>> identity;
    for (int generation = 0; generation < kGenerations && at != nullptr; ++generation) {
      identity = own(*at);
      if (identity) break;
      auto parent = session->processes.find(at->ppid);
      at = parent == session->processes.end() || at->ppid == at->pid ? nullptr : &parent->second;
    }
    found[pid] = identity ? *identity : std::nullopt;
  }
  for (auto& [pid, process] : session->processes) process.rank = found[pid];
}

void InferStartedRanks(Session* session) {
  // Which process has which TCP endpoints, and which endpoints each one talked to.
  std::map<TcpEndpoint, std::set<uint32_t>> owners;
  std::map<uint32_t, std::set<TcpEndpoint>> talked_to;
  for (const TcpTransfer& transfer : session->tcp_transfers) {
    owners[transfer.local].insert(transfer.pid);
    talked_to[transfer.pid].insert(transfer.remote);
  }
  if (talked_to.empty()) return;
  auto parent_of = [&](uint32_t pid) {
    auto process = session->processes.find(pid);
    return process == session->processes.end() ? 0u : process->second.ppid;
  };
  // Siblings without a rank that exchanged data with each other, by their parent.
  std::map<uint32_t, std::set<uint32_t>> peers_by_parent;
  for (const auto& [pid, remotes] : talked_to) {
    auto process = session->processes.find(pid);
    if (process == session->processes.end() || process->second.rank || pid == 0 ||
        !IsMultiprocessingChild(*session, pid))
      continue;
    const uint32_t parent = process->second.ppid;
    if (parent == 0 || parent == pid) continue;
    for (const TcpEndpoint& remote : remotes) {
      auto owner = owners.find(remote);
      if (owner == owners.end()) continue;
      for (uint32_t other : owner->second) {
        auto sibling = session->processes.find(other);
        if (other == pid || sibling == session->processes.end() || sibling->second.rank ||
            sibling->second.ppid != parent || !IsMultiprocessingChild(*session, other))
          continue;
        peers_by_parent[parent].insert(pid);
        peers_by_parent[parent].insert(other);
      }
    }
  }
  auto started = [&](uint32_t pid) {
    auto thread = session->threads.find(pid);
    const uint64_t start = thread == session->threads.end() ? 0 : thread->second.start_ns;
    // One seen starting came after every one that was there before the recording.
    return std::pair(start, pid);
  };
  std::map<uint32_t, RankIdentity> inferred;
  for (const auto& [parent, peers] : peers_by_parent) {
    if (peers.size() < 2) continue;
    std::vector<uint32_t> order(peers.begin(), peers.end());
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return started(a) < started(b); });
    for (size_t i = 0; i < order.size(); ++i) {
      RankIdentity identity;
      identity.rank = static_cast<uint32_t>(i);
      identity.world_size = static_cast<uint32_t>(order.size());
      identity.inferred = true;
      inferred[order[i]] = identity;
    }
  }
  if (inferred.empty()) return;
  // Each process without a rank takes its nearest inferred ancestor's (a fork copies what it is).
  constexpr int kGenerations = 64;
  for (auto& [pid, process] : session->processes) {
    if (process.rank) continue;
    uint32_t at = pid;
    for (int generation = 0; generation < kGenerations && at != 0; ++generation) {
      auto found = inferred.find(at);
      if (found != inferred.end()) {
        process.rank = found->second;
        break;
      }
      const uint32_t parent = parent_of(at);
      at = parent == at ? 0 : parent;
    }
  }
}

}  // namespace gprof::collector
