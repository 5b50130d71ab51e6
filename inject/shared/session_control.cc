#include "inject/shared/session_control.h"

#include <linux/futex.h>

#include <cerrno>
#include <cstring>

namespace gprof {

SessionControl::~SessionControl() {
  if (holds_profiler_alive_) {
    // Let go before the mapping goes, or the kernel would walk this thread's robust list into
    // memory no longer there. gprof-run going away without closing the session is its end to
    // the writers: the mark the kernel would have made.
    pthread_mutex_unlock(&state_->profiler_alive);
    if (!closing()) {
      __atomic_store_n(reinterpret_cast<unsigned*>(&state_->profiler_alive.__data.__lock),
                       FUTEX_OWNER_DIED, __ATOMIC_RELEASE);
    }
  }
  DetachSharedSegment(state_);
}

int SessionControl::Create(int uid, int gid) {
  if (state_ != nullptr) return EBUSY;
  void* memory = nullptr;
  // Zeroed, then the header: every atomic's initial state is all-zero bytes.
  int error = CreateSharedSegment(sizeof(SessionControlState), kSessionControlMagic, uid, gid,
                                  &memory, &handle_);
  if (error != 0) return error;
  state_ = static_cast<SessionControlState*>(memory);
  pthread_mutexattr_t attributes;
  pthread_mutexattr_init(&attributes);
  pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  error = pthread_mutex_init(&state_->profiler_alive, &attributes);
  pthread_mutexattr_destroy(&attributes);
  if (error == 0) error = pthread_mutex_lock(&state_->profiler_alive);
  if (error != 0) {
    DetachSharedSegment(state_);
    state_ = nullptr;
    return error;
  }
  holds_profiler_alive_ = true;
  return 0;
}

int SessionControl::Attach(const char* handle) {
  if (state_ != nullptr) return EBUSY;
  void* memory = nullptr;
  int error =
      AttachSharedSegment(handle, sizeof(SessionControlState), kSessionControlMagic, &memory);
  if (error != 0) return error;
  state_ = static_cast<SessionControlState*>(memory);
  handle_ = handle;
  return 0;
}

int SessionControl::Register(uint32_t pid, uint64_t start_ticks, uint32_t pid_namespace) {
  if (state_ == nullptr) return kUnslotted;
  int slot = kUnslotted;
  for (uint32_t i = 0; i < SessionControlState::kWriters; ++i) {
    uint32_t free = 0;
    if (state_->writers[i].pid.compare_exchange_strong(free, pid, std::memory_order_seq_cst)) {
      state_->writers[i].pid_namespace = pid_namespace;
      for (auto& stripe : state_->writer_calls[i].submitted)
        stripe.count.store(0, std::memory_order_relaxed);
      state_->writer_calls[i].accounted.count.store(0, std::memory_order_relaxed);
      state_->writers[i].start_ticks.store(start_ticks, std::memory_order_release);
      slot = static_cast<int>(i);
      break;
    }
  }
  if (slot == kUnslotted) state_->unslotted_writers.fetch_add(1, std::memory_order_seq_cst);
  // After the slot is taken: gprof-run sets the flag before it reads the slots.
  if (state_->closing_at_ns.load(std::memory_order_seq_cst) != 0) {
    Unregister(slot);
    return kClosed;
  }
  return slot;
}

void SessionControl::Unregister(int slot) {
  if (state_ == nullptr || slot == kClosed) return;
  if (slot == kUnslotted) {
    state_->unslotted_writers.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  state_->writers[slot].start_ticks.store(0, std::memory_order_relaxed);
  state_->writers[slot].pid.store(0, std::memory_order_seq_cst);
}

bool SessionControl::profiler_ended() const {
  if (state_ == nullptr) return false;
  // glibc's mutex word (the first field of __data): the owner's tid, FUTEX_OWNER_DIED once the
  // kernel found its owner gone. Read, never locked: a writer that took the lock would become
  // its owner, and the next writer would see a live one.
  unsigned word = __atomic_load_n(
      reinterpret_cast<const unsigned*>(&state_->profiler_alive.__data.__lock), __ATOMIC_ACQUIRE);
  return (word & FUTEX_OWNER_DIED) != 0;
}

void SessionControl::SetStartTicks(int slot, uint64_t start_ticks) {
  if (state_ == nullptr || slot < 0) return;
  state_->writers[slot].start_ticks.store(start_ticks, std::memory_order_release);
}

bool SessionControl::closing() const {
  return state_ != nullptr && state_->closing_at_ns.load(std::memory_order_seq_cst) != 0;
}

void SessionControl::Note(uint32_t pid, const char* file, format::StopCause cause, int error,
                          uint64_t time_ns, uint64_t records_lost) {
  if (state_ == nullptr) return;
  uint64_t index = state_->notes_taken.fetch_add(1, std::memory_order_acq_rel);
  if (index >= SessionControlState::kNotes) return;
  SessionControlState::Note& note = state_->notes[index];
  note.pid = pid;
  note.time_ns = time_ns;
  note.cause = static_cast<uint32_t>(cause);
  note.error = error;
  note.records_lost = records_lost;
  memset(note.file, 0, sizeof(note.file));
  strncpy(note.file, file, sizeof(note.file) - 1);
  note.ready.store(1, std::memory_order_release);
}

SessionControlState::CallCounter* SessionControl::SubmittedCalls(int slot) {
  if (state_ == nullptr || slot < 0) return nullptr;
  return state_->writer_calls[slot].submitted;
}

void SessionControl::AccountCalls(int slot, uint64_t calls) {
  if (state_ == nullptr || slot < 0 || calls == 0) return;
  state_->writer_calls[slot].accounted.count.fetch_add(calls, std::memory_order_release);
}

void SessionControl::NoteNestedSession(uint32_t pid, const char* directory, uint64_t calls) {
  if (state_ == nullptr) return;
  uint64_t index = state_->nested_taken.fetch_add(1, std::memory_order_acq_rel);
  if (index >= SessionControlState::kNestedSessions) return;
  SessionControlState::NestedSession& nested = state_->nested[index];
  nested.pid = pid;
  nested.calls = calls;
  memset(nested.directory, 0, sizeof(nested.directory));
  strncpy(nested.directory, directory, sizeof(nested.directory) - 1);
  nested.ready.store(1, std::memory_order_release);
}

void SessionControl::Close(uint64_t now_ns) {
  if (state_ == nullptr) return;
  uint64_t open = 0;
  state_->closing_at_ns.compare_exchange_strong(open, now_ns, std::memory_order_seq_cst);
}

uint64_t SessionControl::closing_at_ns() const {
  return state_ != nullptr ? state_->closing_at_ns.load(std::memory_order_seq_cst) : 0;
}

uint64_t SessionControl::unslotted_writers() const {
  return state_ != nullptr ? state_->unslotted_writers.load(std::memory_order_seq_cst) : 0;
}

}  // namespace gprof
