#include "collector/model/python_model.h"

#include <algorithm>

#include "inject/format/kernel_events.h"

namespace gprof::collector {
namespace {

// A waker's stack is read just after its wakeup is noted: within this of it.
constexpr uint64_t kWakerStackWithinNs = 1'000'000;

uint64_t HashFrames(const std::vector<PythonFrameRef>& frames) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const PythonFrameRef& frame : frames) {
    for (uint64_t part : {frame.code, static_cast<uint64_t>(static_cast<uint32_t>(frame.offset)),
                          uint64_t{frame.tag}, uint64_t{frame.flags}}) {
      hash = (hash ^ part) * 0x100000001b3ull;
    }
  }
  return hash;
}

}  // namespace

bool PythonStack::truncated() const { return (flags & GPROF_PY_STACK_TRUNCATED) != 0; }
bool PythonStack::incomplete() const { return (flags & GPROF_PY_STACK_INCOMPLETE) != 0; }

uint32_t PythonRecord::InternFrames(std::vector<PythonFrameRef> frames) {
  std::vector<uint32_t>& same_hash = set_index_[HashFrames(frames)];
  for (uint32_t index : same_hash) {
    if (frame_sets[index] == frames) return index;
  }
  same_hash.push_back(static_cast<uint32_t>(frame_sets.size()));
  frame_sets.push_back(std::move(frames));
  return same_hash.back();
}

void PythonRecord::Finish() {
  by_key_.clear();
  samples_.clear();
  for (uint32_t i = 0; i < stacks.size(); ++i) {
    const PythonStack& stack = stacks[i];
    if (stack.kind == PythonStackKind::kSample) {
      samples_.push_back(i);
    } else {
      by_key_[{static_cast<uint8_t>(stack.kind), stack.key_tid, stack.key_ns}].push_back(i);
    }
  }
  std::stable_sort(samples_.begin(), samples_.end(), [&](uint32_t a, uint32_t b) {
    return std::tie(stacks[a].tid, stacks[a].time_ns) < std::tie(stacks[b].tid, stacks[b].time_ns);
  });
  set_index_.clear();  // only needed while reading
}

const PythonStack* PythonRecord::Waiter(uint32_t tid, uint64_t start_ns) const {
  auto found = by_key_.find({static_cast<uint8_t>(PythonStackKind::kWaiter), tid, start_ns});
  return found == by_key_.end() ? nullptr : &stacks[found->second.back()];
}

const PythonStack* PythonRecord::Waker(uint32_t tid, uint64_t start_ns, uint64_t wake_ns) const {
  auto found = by_key_.find({static_cast<uint8_t>(PythonStackKind::kWaker), tid, start_ns});
  if (found == by_key_.end()) return nullptr;
  const PythonStack* best = nullptr;
  for (uint32_t index : found->second) {
    const PythonStack& stack = stacks[index];
    if (stack.time_ns < wake_ns || stack.time_ns - wake_ns > kWakerStackWithinNs) continue;
    if (best == nullptr || stack.time_ns < best->time_ns) best = &stack;
  }
  return best;
}

const PythonStack* PythonRecord::CudaCall(uint32_t tid, uint64_t enter_ns) const {
  auto found = by_key_.find({static_cast<uint8_t>(PythonStackKind::kCudaCall), tid, enter_ns});
  return found == by_key_.end() ? nullptr : &stacks[found->second.back()];
}

std::vector<const PythonStack*> PythonRecord::Samples(uint32_t tid, uint64_t start_ns,
                                                      uint64_t end_ns) const {
  std::vector<const PythonStack*> out;
  auto first =
      std::lower_bound(samples_.begin(), samples_.end(), std::make_pair(tid, start_ns),
                       [&](uint32_t index, const std::pair<uint32_t, uint64_t>& key) {
                         return std::make_pair(stacks[index].tid, stacks[index].time_ns) < key;
                       });
  for (auto it = first; it != samples_.end(); ++it) {
    const PythonStack& stack = stacks[*it];
    if (stack.tid != tid || stack.time_ns >= end_ns) break;
    out.push_back(&stack);
  }
  return out;
}

}  // namespace gprof::collector
