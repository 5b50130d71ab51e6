// A process's rank identity (model.h, RankIdentity) from the variables its launcher set, and the
// identity of each process of a session: its own environment's where the kernel recorder read it
// at an exec, else the one it inherited.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "collector/model/model.h"

namespace gprof::collector {

// The identity the variables give, as `lookup` finds them (nullptr: unset): the rank from the first
// launcher of inject/format/rank_variables.h whose rank variable holds a number, the local rank and
// world size from that same launcher's. None when no rank variable holds one.
std::optional<RankIdentity> RankFromVariables(
    const std::function<const char*(const char*)>& lookup);

// The same from "NAME=value" strings each ended by a NUL (kernel.gpr's gprof_launch_variables).
std::optional<RankIdentity> RankFromVariableText(std::string_view text);

// Each process's identity where it did not read its own: its parent's, for the command's own
// process session.json's (gprof-run's environment), through at most a few dozen generations.
void InheritRanks(Session* session);

}  // namespace gprof::collector
