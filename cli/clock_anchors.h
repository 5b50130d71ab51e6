// What lets sessions of several hosts be put on one clock: the host's name and boot, and clock
// anchors, CLOCK_REALTIME and the recording clock read at one moment (session.json's "host" and
// "clock_anchors", inject/format/session_json.h).
#pragma once

#include <cstdint>
#include <string>

#include "collector/model/model.h"

namespace gprof::cli {

// Takes gprof-run's own time namespace's offsets (`unshare -T ... gprof-run`) off every time it
// reads from here on (inject/shared/clock.h), so that its times are the kernel's, as BPF's and the
// injected library's are. Call first, before any time is read. Returns {monotonic, boottime}.
std::pair<int64_t, int64_t> TakeOwnTimeNamespaceOffsets();

// GPROF_TEST_REALTIME_SKEW_NS, for tests only: nanoseconds (may be negative) added to every
// CLOCK_REALTIME reading gprof-run writes, so that tests of the merge on one machine can make
// sessions look as if their hosts' wall clocks differed. 0 when unset or not a number.
int64_t TestRealtimeSkewNs();

// CLOCK_REALTIME (plus the test skew) and the kernel's CLOCK_MONOTONIC and CLOCK_BOOTTIME, read
// a few times as MONOTONIC, REALTIME, BOOTTIME, MONOTONIC: the narrowest bracket's middle and
// width; and the kernel's bound on REALTIME's own error (adjtimex), plus the test skew.
collector::ClockAnchor ReadClockAnchor();

std::string HostName();
// /proc/sys/kernel/random/boot_id, without its newline; empty when unreadable.
std::string BootId();

}  // namespace gprof::cli
