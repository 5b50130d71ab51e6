#include "collector/job/clock_alignment.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace gprof::collector {
namespace {

// A session's REALTIME minus its recording clock, from its narrowest anchor, and that anchor's
// width; nullopt without one.
struct WallOffset {
  int64_t realtime_minus_monotonic_ns = 0;
  uint64_t width_ns = 0;
  uint64_t max_error_ns = 0;  // REALTIME's own error bound; 0: not recorded
};

// Past these an anchor read from a session is no reading (146 years since the epoch or the boot;
// an error bound of 18 minutes, where the kernel's stops at 16 s): taken, their sums would wrap.
constexpr uint64_t kMostClockNs = uint64_t{1} << 62;
constexpr uint64_t kMostErrorNs = uint64_t{1} << 40;

std::optional<WallOffset> WallOffsetOf(const SessionMeta& meta) {
  const ClockAnchor* best = nullptr;
  for (const std::optional<ClockAnchor>* anchor : {&meta.start_anchor, &meta.end_anchor}) {
    if (!*anchor || (*anchor)->realtime_ns == 0 || (*anchor)->monotonic_ns == 0) continue;
    if ((*anchor)->realtime_ns >= kMostClockNs || (*anchor)->monotonic_ns >= kMostClockNs ||
        (*anchor)->uncertainty_ns >= kMostErrorNs)
      continue;
    if (best == nullptr || (*anchor)->uncertainty_ns < best->uncertainty_ns) best = &**anchor;
  }
  if (best == nullptr) return std::nullopt;
  return WallOffset{
      static_cast<int64_t>(best->realtime_ns) - static_cast<int64_t>(best->monotonic_ns),
      best->uncertainty_ns, std::min(best->realtime_max_error_ns, kMostErrorNs)};
}

bool SameBoot(const SessionMeta& a, const SessionMeta& b) {
  return !a.boot_id.empty() && a.boot_id == b.boot_id;
}

}  // namespace

std::vector<SessionClock> AlignClocks(const std::vector<const SessionMeta*>& sessions,
                                      const std::vector<SessionMessage>& messages) {
  std::vector<SessionClock> clocks(sessions.size());
  if (sessions.empty()) return clocks;
  // Each boot's first session is its clock's reference; the job's is the first session's.
  std::vector<int> boot_of(sessions.size(), -1);
  std::vector<int> boots;  // the first session of each boot
  for (size_t i = 0; i < sessions.size(); ++i) {
    for (int first : boots) {
      if (SameBoot(*sessions[i], *sessions[first])) boot_of[i] = first;
    }
    if (boot_of[i] < 0) {
      boot_of[i] = static_cast<int>(i);
      boots.push_back(static_cast<int>(i));
    }
  }
  // Each boot placed on the first's by the anchors.
  std::vector<int64_t> boot_offset(sessions.size(), 0);
  std::vector<uint64_t> boot_uncertainty(sessions.size(), 0);
  std::vector<std::string> boot_how(sessions.size(), "same boot");
  const std::optional<WallOffset> reference = WallOffsetOf(*sessions[0]);
  for (int first : boots) {
    if (first == boot_of[0]) continue;
    std::optional<WallOffset> wall = WallOffsetOf(*sessions[first]);
    if (!reference || !wall) {
      boot_how[first] = "no clock anchors: its times are taken as they are";
      clocks[first].uncertainty_known = false;
      continue;
    }
    // Equal REALTIME: monotonic_ref = monotonic + (wall - wall_ref).
    boot_offset[first] = wall->realtime_minus_monotonic_ns - reference->realtime_minus_monotonic_ns;
    // The brackets' widths, and each wall clock's own error: two hosts' REALTIME agree only as
    // well as NTP keeps each (unknown in sessions that did not record it).
    boot_uncertainty[first] = wall->width_ns + reference->width_ns;
    if (wall->max_error_ns != 0 && reference->max_error_ns != 0) {
      boot_uncertainty[first] += wall->max_error_ns + reference->max_error_ns;
      clocks[first].wall_error_known = true;
    } else {
      // The brackets alone say nothing of how far the wall clocks disagree: not known, unless
      // messages both ways bound it below.
      clocks[first].uncertainty_known = false;
    }
    boot_how[first] = "REALTIME anchors";
  }
  // Corrected by the messages between boots: received after sent, on the job's clock. For boot
  // b against the reference boot, each message r->b bounds offset_b from below, each b->r from
  // above (through the reference's clock, offset 0).
  for (int first : boots) {
    if (first == boot_of[0]) continue;
    int64_t low = std::numeric_limits<int64_t>::min(), high = std::numeric_limits<int64_t>::max();
    size_t used = 0;
    for (const SessionMessage& message : messages) {
      const int from = boot_of[message.from], to = boot_of[message.to];
      // sent + offset_from <= received + offset_to
      if (from == boot_of[0] && to == first) {
        low = std::max(
            low, static_cast<int64_t>(message.sent_ns) - static_cast<int64_t>(message.received_ns));
        ++used;
      } else if (from == first && to == boot_of[0]) {
        high = std::min(high, static_cast<int64_t>(message.received_ns) -
                                  static_cast<int64_t>(message.sent_ns));
        ++used;
      }
    }
    if (used == 0) continue;
    int64_t placed = boot_offset[first];
    int64_t corrected = placed;
    if (low > high) {
      // Bounds that cross: the messages' own timing (a send's start is before its bytes left)
      // cannot be met by any offset; the middle of the two is the best there is.
      corrected = low / 2 + high / 2;
      boot_uncertainty[first] = static_cast<uint64_t>(low - high) / 2;
      clocks[first].uncertainty_known = true;
    } else {
      // What the anchors allow, where their error is known, narrows what the messages allow:
      // messages one way alone bound only one side. Anchors that the messages contradict were
      // off by more than their clocks said: the messages alone then.
      if (clocks[first].wall_error_known) {
        const int64_t reach = static_cast<int64_t>(boot_uncertainty[first]);
        const int64_t anchors_low = placed - reach, anchors_high = placed + reach;
        if (anchors_low <= high && anchors_high >= low) {
          low = std::max(low, anchors_low);
          high = std::min(high, anchors_high);
        }
      }
      corrected = std::clamp(placed, low, high);
      if (low != std::numeric_limits<int64_t>::min() &&
          high != std::numeric_limits<int64_t>::max()) {
        // Bounded both ways: the middle of what is allowed, as NTP takes it.
        corrected = low + (high - low) / 2;
        boot_uncertainty[first] = static_cast<uint64_t>(high - low) / 2;
        clocks[first].uncertainty_known = true;
      }
    }
    clocks[first].correction_ns = corrected - placed;
    clocks[first].messages = used;
    boot_offset[first] = corrected;
    boot_how[first] =
        (boot_how[first] == "REALTIME anchors" ? "REALTIME anchors, corrected by " : "placed by ") +
        std::to_string(used) + " message" + (used == 1 ? "" : "s") + " between hosts";
  }
  for (size_t i = 0; i < sessions.size(); ++i) {
    const int first = boot_of[i];
    clocks[i].reference = first;
    clocks[i].same_boot = first == boot_of[0];
    clocks[i].offset_ns = boot_offset[first];
    clocks[i].uncertainty_ns = boot_uncertainty[first];
    clocks[i].how = boot_how[first];
    if (static_cast<int>(i) != first) {
      clocks[i].correction_ns = clocks[first].correction_ns;
      clocks[i].messages = clocks[first].messages;
      clocks[i].wall_error_known = clocks[first].wall_error_known;
      clocks[i].uncertainty_known = clocks[first].uncertainty_known;
    }
  }
  return clocks;
}

}  // namespace gprof::collector
