#include "tests/mock_cupti/activity_buffers.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

namespace mock_cupti {
namespace {

constexpr size_t kRecordAlignment = 8;  // ACTIVITY_RECORD_ALIGNMENT in cupti_common.h

static_assert(sizeof(CUpti_ActivityKernel10) % kRecordAlignment == 0);
static_assert(sizeof(CUpti_ActivityMemcpy6) % kRecordAlignment == 0);
static_assert(sizeof(CUpti_ActivityMemset4) % kRecordAlignment == 0);
static_assert(sizeof(CUpti_ActivitySynchronization2) % kRecordAlignment == 0);
static_assert(sizeof(CUpti_ActivityAPI) % kRecordAlignment == 0);

// Process-wide, so a pending record of a finalized session never names a buffer of the next one.
std::atomic<uint64_t> next_buffer_id{1};

// A pending record: its buffer's id above its offset in the buffer.
ActivityBuffers::PendingRecord ToPending(uint64_t buffer_id, size_t offset) {
  return buffer_id << 32 | offset;
}

void SetGpuTimes(uint8_t* record, uint64_t start, uint64_t end) {
  switch (reinterpret_cast<CUpti_Activity*>(record)->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto* kernel = reinterpret_cast<CUpti_ActivityKernel10*>(record);
      kernel->start = start;
      kernel->end = end;
      kernel->completed = end;  // no child kernels
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* copy = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
      copy->start = start;
      copy->end = end;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto* set = reinterpret_cast<CUpti_ActivityMemset4*>(record);
      set->start = start;
      set->end = end;
      break;
    }
    default:
      break;
  }
}

}  // namespace

size_t RecordSize(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
      return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
      return sizeof(CUpti_ActivityAPI);
    case CUPTI_ACTIVITY_KIND_OVERHEAD:
      return sizeof(CUpti_ActivityOverhead3);
    case CUPTI_ACTIVITY_KIND_DEVICE:
      return sizeof(CUpti_ActivityDevice5);
    default:
      return 0;
  }
}

ActivityBuffers::ActivityBuffers(std::optional<size_t> max_requests)
    : max_requests_(max_requests) {}

void ActivityBuffers::Stop() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  buffers_.clear();
  spares_.clear();
  worker_wake_.notify_all();
}

void ActivityBuffers::SetCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                   CUpti_BuffersCallbackCompleteFunc complete) {
  std::lock_guard lock(mutex_);
  request_ = request;
  complete_ = complete;
}

bool ActivityBuffers::HasCallbacks() {
  std::lock_guard lock(mutex_);
  return request_ != nullptr;
}

void ActivityBuffers::SetFlushPeriod(uint32_t period_ms) {
  std::lock_guard lock(mutex_);
  flush_period_ms_ = period_ms;
  if (period_ms > 0) StartWorkerLocked();
  worker_wake_.notify_all();
}

void ActivityBuffers::Append(const void* record, size_t size, CUcontext context) {
  Write(record, size, context, false);
}

ActivityBuffers::PendingRecord ActivityBuffers::AppendPending(const void* record, size_t size,
                                                              CUcontext context) {
  return Write(record, size, context, true);
}

ActivityBuffers::PendingRecord ActivityBuffers::Write(const void* record, size_t size,
                                                      CUcontext context, bool pending) {
  std::unique_lock lock(mutex_);
  Buffer* buffer = BufferWithRoom(lock, size);
  if (buffer == nullptr) {
    ++dropped_[context];
    return 0;
  }
  const size_t offset = buffer->used;
  std::memcpy(buffer->data + offset, record, size);
  buffer->used += size;
  ++buffer->records;
  if (pending) ++buffer->pending;
  if (buffer->max_records != 0 && buffer->records == buffer->max_records) MarkFull(*buffer);
  return pending ? ToPending(buffer->id, offset) : 0;
}

ActivityBuffers::Buffer* ActivityBuffers::BufferWithRoom(std::unique_lock<std::mutex>& lock,
                                                         size_t size) {
  bool asked = false;
  for (;;) {
    if (!buffers_.empty() && !buffers_.back().full) {
      Buffer& current = buffers_.back();
      if (current.used + size <= current.size) return &current;
      MarkFull(current);
    }
    if (!spares_.empty()) {
      buffers_.push_back(spares_.back());
      spares_.pop_back();
      continue;
    }
    // One request per record: a client that keeps giving unusable buffers drops records, it
    // does not hang the call.
    if (asked || stopping_ || request_ == nullptr ||
        (max_requests_ && requests_ >= *max_requests_)) {
      return nullptr;
    }
    asked = true;
    ++requests_;
    const CUpti_BuffersCallbackRequestFunc request = request_;
    uint8_t* data = nullptr;
    size_t bytes = 0;
    size_t max_records = 0;
    lock.unlock();
    request(&data, &bytes, &max_records);
    lock.lock();
    if (data == nullptr) return nullptr;
    Buffer buffer{next_buffer_id++, data, bytes, max_records};
    if (reinterpret_cast<uintptr_t>(data) % kRecordAlignment != 0 || bytes < size) {
      // Unusable: handed back empty with the next delivery, the record dropped. At the front,
      // so that a buffer another thread opened meanwhile stays the current one.
      buffers_.push_front(buffer);
      MarkFull(buffers_.front());
      return nullptr;
    }
    spares_.push_back(buffer);
  }
}

void ActivityBuffers::MarkFull(Buffer& buffer) {
  buffer.full = true;
  // CUPTI's heuristics return a full buffer soon; a flush period overrides them.
  if (buffer.pending == 0 && flush_period_ms_ == 0) {
    StartWorkerLocked();
    worker_wake_.notify_all();
  }
}

ActivityBuffers::Buffer* ActivityBuffers::Find(uint64_t id) {
  const auto it = std::find_if(buffers_.begin(), buffers_.end(),
                               [&](const Buffer& buffer) { return buffer.id == id; });
  return it == buffers_.end() ? nullptr : &*it;
}

void ActivityBuffers::Complete(PendingRecord pending, uint64_t start, uint64_t end) {
  std::lock_guard lock(mutex_);
  Buffer* buffer = Find(pending >> 32);
  if (buffer == nullptr) return;  // handed over by a forced flush, or forgotten by cuptiFinalize
  SetGpuTimes(buffer->data + (pending & 0xffffffff), start, end);
  --buffer->pending;
  if (buffer->full && buffer->pending == 0 && flush_period_ms_ == 0) {
    StartWorkerLocked();
    worker_wake_.notify_all();
  }
}

bool ActivityBuffers::Deliverable(const Buffer& buffer, Delivery delivery) {
  switch (delivery) {
    case Delivery::kFullAndComplete:
      return buffer.full && buffer.pending == 0;
    case Delivery::kComplete:
      return (buffer.full || buffer.records > 0) && buffer.pending == 0;
    case Delivery::kAll:
      return buffer.full || buffer.records > 0;
  }
  return false;
}

std::vector<ActivityBuffers::Buffer> ActivityBuffers::TakeDeliverable(Delivery delivery) {
  std::vector<Buffer> taken;
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    if (Deliverable(*it, delivery)) {
      taken.push_back(*it);
      it = buffers_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

void ActivityBuffers::HandBack(const std::vector<Buffer>& buffers) {
  CUpti_BuffersCallbackCompleteFunc complete;
  {
    std::lock_guard lock(mutex_);
    complete = complete_;
  }
  // Since CUDA 6.0 every buffer is global: context NULL, stream 0.
  for (const Buffer& buffer : buffers) complete(nullptr, 0, buffer.data, buffer.size, buffer.used);
}

void ActivityBuffers::Flush(bool forced) {
  std::vector<Buffer> taken;
  {
    std::lock_guard lock(mutex_);
    taken = TakeDeliverable(forced ? Delivery::kAll : Delivery::kComplete);
  }
  HandBack(taken);
}

size_t ActivityBuffers::TakeDropped(CUcontext context) {
  std::lock_guard lock(mutex_);
  const auto it = dropped_.find(context);
  if (it == dropped_.end()) return 0;
  const size_t count = it->second;
  dropped_.erase(it);
  return count;
}

void ActivityBuffers::StartWorkerLocked() {
  if (worker_started_) return;
  worker_started_ = true;
  // All signals blocked in the worker, so that signals sent to the process reach its own threads.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t worker;
  const int created = pthread_create(
      &worker, &attr,
      [](void* self) -> void* {
        static_cast<ActivityBuffers*>(self)->RunWorker();
        return nullptr;
      },
      this);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  // Named, or it would carry the name of whichever thread started it (fake-gpu, a launcher).
  // Without it, buffers only come back through cuptiActivityFlushAll.
  if (created == 0) pthread_setname_np(worker, "mock-cupti");
}

void ActivityBuffers::RunWorker() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (flush_period_ms_ == 0) {
      worker_wake_.wait(lock, [&] {
        return stopping_ || flush_period_ms_ > 0 ||
               std::any_of(buffers_.begin(), buffers_.end(), [](const Buffer& buffer) {
                 return Deliverable(buffer, Delivery::kFullAndComplete);
               });
      });
      if (flush_period_ms_ > 0) continue;
    } else {
      const uint32_t period_ms = flush_period_ms_;
      const bool changed = worker_wake_.wait_for(lock, std::chrono::milliseconds(period_ms), [&] {
        return stopping_ || flush_period_ms_ != period_ms;
      });
      if (changed) continue;
    }
    std::vector<Buffer> ready = TakeDeliverable(Delivery::kFullAndComplete);
    lock.unlock();
    HandBack(ready);
    lock.lock();
  }
}

}  // namespace mock_cupti
