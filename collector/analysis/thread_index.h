// The session's records of each kind by thread, in time order, for interval lookups: what the
// wait reader and the wait classifier look a thread's records up in.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <unordered_map>

#include "collector/model/model.h"
#include "collector/model/record_storage.h"

namespace gprof::collector {

// Some records of one thread, in time order, as pointers into the session's vector.
template <typename Record>
class ThreadRecords {
 public:
  class iterator {
   public:
    iterator(const Record* records, const uint32_t* at) : records_(records), at_(at) {}
    const Record* operator*() const { return records_ + *at_; }
    iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const iterator& other) const { return at_ == other.at_; }

   private:
    const Record* records_;
    const uint32_t* at_;
  };
  ThreadRecords(const Record* records, std::span<const uint32_t> indices)
      : records_(records), indices_(indices) {}
  iterator begin() const { return {records_, indices_.data()}; }
  iterator end() const { return {records_, indices_.data() + indices_.size()}; }
  size_t size() const { return indices_.size(); }
  bool empty() const { return indices_.empty(); }

 private:
  const Record* records_;
  std::span<const uint32_t> indices_;
};

// One kind of record, by thread, in time order. A thread is in one system call, one page fault,
// one lock wait at a time, and off-CPU once: such records of one thread never overlap, so sorted
// by start they are sorted by end too, which During needs. (CUDA calls nest: only At is asked of
// them.) Held as 4-byte indices into the session's vector, grouped by thread in one array: the
// index is as long as the session and is made while the whole model is in memory, at the peak.
template <typename Record>
class PerThread {
 public:
  // Counted first, so that the array is made once at its size and each thread's part placed.
  explicit PerThread(const RecordVector<Record>& records) : records_(records.data()) {
    // A vector of 4 G records or more would need hundreds of GiB: the index stops short of it.
    const size_t count = std::min<size_t>(records.size(), UINT32_MAX);
    for (size_t i = 0; i < count; ++i) ++by_tid_[records[i].tid].end;
    uint32_t next = 0;
    for (auto& [tid, part] : by_tid_) {
      part.begin = part.end = next + part.end;  // `end` counted; filled from the part's end down
      next = part.begin;
    }
    ReserveLarge(order_, count);
    order_.resize(count);
    uint32_t last_tid = 0;
    Part* last = nullptr;
    for (size_t i = count; i-- > 0;) {  // backwards, so that each part fills in time order
      if (last == nullptr || records[i].tid != last_tid) {
        last_tid = records[i].tid;
        last = &by_tid_[last_tid];
      }
      order_[--last->begin] = static_cast<uint32_t>(i);
    }
  }

  // Those of `tid` that overlap [start, end).
  ThreadRecords<Record> During(uint32_t tid, uint64_t start, uint64_t end) const {
    auto all = Of(tid);
    auto first = std::partition_point(all.begin(), all.end(),
                                      [&](uint32_t i) { return EndOf(records_[i]) <= start; });
    auto last = std::partition_point(first, all.end(),
                                     [&](uint32_t i) { return StartOf(records_[i]) < end; });
    return ThreadRecords<Record>(records_, {first, last});
  }

  // Those of `tid` that began in [start, end), in start order (for records that may nest).
  ThreadRecords<Record> StartingIn(uint32_t tid, uint64_t start, uint64_t end) const {
    auto all = Of(tid);
    auto first = std::partition_point(all.begin(), all.end(),
                                      [&](uint32_t i) { return StartOf(records_[i]) < start; });
    auto last = std::partition_point(first, all.end(),
                                     [&](uint32_t i) { return StartOf(records_[i]) < end; });
    return ThreadRecords<Record>(records_, {first, last});
  }

  // The latest of `tid` that began before `time`, or nullptr.
  const Record* LastBefore(uint32_t tid, uint64_t time) const {
    auto all = Of(tid);
    auto after = std::partition_point(all.begin(), all.end(),
                                      [&](uint32_t i) { return StartOf(records_[i]) < time; });
    return after == all.begin() ? nullptr : &records_[*(after - 1)];
  }

  // The one of `tid` in progress at `time`: the latest that began at or before it, unless it
  // ended before.
  const Record* At(uint32_t tid, uint64_t time) const {
    auto all = Of(tid);
    auto after = std::partition_point(all.begin(), all.end(),
                                      [&](uint32_t i) { return StartOf(records_[i]) <= time; });
    if (after == all.begin()) return nullptr;
    const Record* candidate = &records_[*(after - 1)];
    return EndOf(*candidate) >= time ? candidate : nullptr;
  }

 private:
  static uint64_t StartOf(const ApiCall& call) { return call.enter_ns; }
  static uint64_t EndOf(const ApiCall& call) { return call.exit_ns; }
  template <typename Any>
  static uint64_t StartOf(const Any& record) {
    return record.start_ns;
  }
  template <typename Any>
  static uint64_t EndOf(const Any& record) {
    return record.end_ns;
  }
  struct Part {
    uint32_t begin = 0;
    uint32_t end = 0;
  };
  std::span<const uint32_t> Of(uint32_t tid) const {
    auto it = by_tid_.find(tid);
    if (it == by_tid_.end()) return {};
    return std::span<const uint32_t>(order_).subspan(it->second.begin,
                                                     it->second.end - it->second.begin);
  }

  const Record* records_;
  RecordVector<uint32_t> order_;  // indices into the records, a thread's together, in time order
  std::unordered_map<uint32_t, Part> by_tid_;  // its part of order_
};

// Per-thread views of the session, for interval lookups.
struct ThreadIndex {
  explicit ThreadIndex(const Session& session)
      : off_cpu(session.off_cpu),
        futex(session.futex_calls),
        futex_waitv(session.futex_waitv_calls),
        calls(session.api_calls),
        lock_waits(session.lock_waits),
        page_faults(session.page_faults),
        quick_fault_runs(session.quick_fault_runs),
        device_waits(session.device_waits),
        memory_map_calls(session.memory_map_calls) {}

  PerThread<OffCpuInterval> off_cpu;
  PerThread<FutexCall> futex;
  PerThread<FutexWaitvCall> futex_waitv;
  PerThread<ApiCall> calls;
  PerThread<LockWait> lock_waits;
  PerThread<PageFault> page_faults;
  PerThread<QuickFaultRun> quick_fault_runs;
  PerThread<DeviceWait> device_waits;
  PerThread<MemoryMapCall> memory_map_calls;
};

}  // namespace gprof::collector
