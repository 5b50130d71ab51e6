// A small fixed-capacity queue for the rare hand-overs between threads (messages, CUPTI's
// buffers). Lock-free, so that a program thread never waits for the writer thread (or a CUPTI
// thread) that holds it: Vyukov's bounded multi-producer, multi-consumer queue, each cell carrying
// the position it is ready for. Constant-initialisable (a cell's position is stored less its index,
// so all zeros is the empty queue): usable before any constructor has run. Not for the per-call
// path, which has its single-producer rings.
#pragma once

#include <atomic>
#include <cstddef>

namespace gprof::inject {

template <typename T, size_t kCapacity>
class BoundedQueue {
 public:
  // False, and nothing stored, when the queue is full.
  bool Push(const T& item) {
    size_t position = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[position % kCapacity];
      ptrdiff_t ready = static_cast<ptrdiff_t>(ReadyFor(cell) - position);
      if (ready == 0) {
        if (tail_.compare_exchange_weak(position, position + 1, std::memory_order_relaxed)) {
          cell.item = item;
          SetReadyFor(cell, position + 1);
          return true;
        }
      } else if (ready < 0) {
        return false;  // the cell still holds an item a lap behind: full
      } else {
        position = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // Moves up to `capacity` items, oldest first, into `out`; returns how many.
  size_t Take(T* out, size_t capacity) {
    size_t taken = 0;
    while (taken < capacity && Pop(&out[taken])) ++taken;
    return taken;
  }

  // In a forked child: a thread the child does not have may have been half-way through a push.
  void ResetAfterFork() {
    for (Cell& cell : cells_) cell.ready_for.store(0, std::memory_order_relaxed);
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
  }

 private:
  struct Cell {
    std::atomic<size_t> ready_for{0};  // less the cell's index
    T item{};
  };

  size_t Index(const Cell& cell) const { return static_cast<size_t>(&cell - cells_); }
  size_t ReadyFor(const Cell& cell) const {
    return cell.ready_for.load(std::memory_order_acquire) + Index(cell);
  }
  void SetReadyFor(Cell& cell, size_t position) {
    cell.ready_for.store(position - Index(cell), std::memory_order_release);
  }

  bool Pop(T* out) {
    size_t position = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[position % kCapacity];
      ptrdiff_t ready = static_cast<ptrdiff_t>(ReadyFor(cell) - (position + 1));
      if (ready == 0) {
        if (head_.compare_exchange_weak(position, position + 1, std::memory_order_relaxed)) {
          *out = cell.item;
          SetReadyFor(cell, position + kCapacity);
          return true;
        }
      } else if (ready < 0) {
        return false;  // empty
      } else {
        position = head_.load(std::memory_order_relaxed);
      }
    }
  }

  Cell cells_[kCapacity];
  std::atomic<size_t> head_{0};  // next position to take
  std::atomic<size_t> tail_{0};  // next position to fill
};

}  // namespace gprof::inject
