// The time-ordered merge's queue (timeline_writer.cc) of what records cause later: slice ends, the
// runnable halves of off-CPU intervals, wake instants.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace gprof::collector::perfetto {

// Events that wait for their time, the next to run first out. Each has a key(), unique; the
// smallest runs first. Usually a handful wait at once (about threads x nesting depth): they are
// kept in a vector sorted largest key first, where a new one takes its place after a short scan
// from the end and the next is taken off the end, with fewer mispredicted branches than a heap's.
// Past kSortedMost (many threads blocked at once) they become a heap, so no session makes it
// quadratic.
template <typename Item>
class PendingQueue {
 public:
  bool empty() const { return items_.empty(); }
  const Item& next() const { return heap_ ? items_.front() : items_.back(); }

  void Push(const Item& item) {
    if (!heap_ && items_.size() == kSortedMost) {
      std::make_heap(items_.begin(), items_.end(), RunsLater{});
      heap_ = true;
    }
    if (heap_) {
      items_.push_back(item);
      std::push_heap(items_.begin(), items_.end(), RunsLater{});
      return;
    }
    items_.push_back(item);
    size_t position = items_.size() - 1;
    for (; position != 0 && items_[position - 1].key() < item.key(); --position)
      items_[position] = items_[position - 1];
    items_[position] = item;
  }

  Item Pop() {
    if (heap_) {
      std::pop_heap(items_.begin(), items_.end(), RunsLater{});
      Item next = items_.back();
      items_.pop_back();
      if (items_.size() == kSortedMost / 2) {
        std::sort(items_.begin(), items_.end(), RunsLater{});  // largest key first
        heap_ = false;
      }
      return next;
    }
    Item next = items_.back();
    items_.pop_back();
    return next;
  }

 private:
  static constexpr size_t kSortedMost = 64;
  struct RunsLater {
    bool operator()(const Item& a, const Item& b) const { return a.key() > b.key(); }
  };
  std::vector<Item> items_;
  bool heap_ = false;
};

}  // namespace gprof::collector::perfetto
