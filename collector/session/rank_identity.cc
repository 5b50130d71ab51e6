#include "collector/session/rank_identity.h"

#include <charconv>
#include <map>
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

}  // namespace gprof::collector
