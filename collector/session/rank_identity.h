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

// Ranks no launcher variable named: where two or more children that the multiprocessing module
// started for one process (their Python stacks say so), none with a rank, exchange TCP data with
// each other (directly, not through a third process), they are taken for the ranks of one job
// started in order, as torch.multiprocessing.spawn starts rank i i-th: each such child is
// numbered by when it started (its main thread's start, else its pid), the world size being their
// count, marked inferred; their descendants inherit it. Workers that talk only to their parent or
// to a server are no job, nor are a server and its client started as programs of their own.
void InferStartedRanks(Session* session);

}  // namespace gprof::collector
