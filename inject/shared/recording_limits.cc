#include "inject/shared/recording_limits.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "inject/shared/clock.h"

namespace gprof {
namespace {

// Room kept back for closing records: an eighth of the cap, at most 4 MiB.
constexpr uint64_t kMaxClosingRoom = 4u << 20;

uint64_t EnvNs(const char* name, uint64_t otherwise) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return otherwise;
  char* end = nullptr;
  unsigned long long value = strtoull(text, &end, 10);
  return *end == '\0' ? value : otherwise;
}

}  // namespace

RecordingWindow RecordingWindow::Between(uint64_t start_ns, uint64_t end_ns) {
  RecordingWindow window;
  window.start_ns = start_ns;
  window.length_ns = end_ns == 0 ? UINT64_MAX - start_ns : std::max(end_ns, start_ns) - start_ns;
  return window;
}

RecordingWindow RecordingWindow::FromEnvironment() {
  return Between(EnvNs(kWindowStartEnv, 0), EnvNs(kWindowEndEnv, 0));
}

SizeBudget::~SizeBudget() { DetachSharedSegment(state_); }

int SizeBudget::Create(uint64_t limit_bytes, int uid, int gid) {
  if (state_ != nullptr) return EBUSY;
  void* memory = nullptr;
  int error = CreateSharedSegment(sizeof(SizeBudgetState), kSizeBudgetMagic, uid, gid, &memory,
                                  &handle_);
  if (error != 0) return error;
  state_ = static_cast<SizeBudgetState*>(memory);
  state_->limit_bytes = limit_bytes;
  state_->data_limit_bytes = limit_bytes - std::min(limit_bytes / 8, kMaxClosingRoom);
  return 0;
}

int SizeBudget::Attach(const char* handle) {
  if (state_ != nullptr) return EBUSY;
  void* memory = nullptr;
  int error = AttachSharedSegment(handle, sizeof(SizeBudgetState), kSizeBudgetMagic, &memory);
  if (error != 0) return error;
  state_ = static_cast<SizeBudgetState*>(memory);
  handle_ = handle;
  return 0;
}

bool SizeBudget::Charge(uint64_t bytes, uint64_t raw_bytes, uint32_t records, bool closing) {
  if (state_ == nullptr) return true;
  bool stopped = state_->stopped_at_ns.load(std::memory_order_acquire) != 0;
  uint64_t limit = closing ? state_->limit_bytes : state_->data_limit_bytes;
  if (!stopped || closing) {
    uint64_t before = state_->used_bytes.fetch_add(bytes, std::memory_order_acq_rel);
    if (before + bytes <= limit) return true;
    state_->used_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
  }
  if (!closing) {
    uint64_t none = 0;
    state_->stopped_at_ns.compare_exchange_strong(none, MonotonicNs(), std::memory_order_acq_rel);
  }
  state_->refused_chunks.fetch_add(1, std::memory_order_relaxed);
  state_->refused_records.fetch_add(records, std::memory_order_relaxed);
  state_->refused_bytes.fetch_add(raw_bytes, std::memory_order_relaxed);
  return false;
}

void SizeBudget::Refund(uint64_t bytes) {
  if (state_ != nullptr) state_->used_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
}

bool SizeBudget::stopped() const {
  return state_ != nullptr && state_->stopped_at_ns.load(std::memory_order_acquire) != 0;
}

SizeBudget::Counts SizeBudget::Read() const {
  if (state_ == nullptr) return Counts{};
  return Counts{
      state_->limit_bytes,           state_->used_bytes.load(),      state_->stopped_at_ns.load(),
      state_->refused_chunks.load(), state_->refused_records.load(), state_->refused_bytes.load()};
}

}  // namespace gprof
