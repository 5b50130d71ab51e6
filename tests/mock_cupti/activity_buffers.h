// The mock's activity buffers: the client's buffers, the records written into them, their delivery
// (worker thread, flushes) and the dropped-record counts. Rules in mock_cupti.h.
#pragma once

#include <cupti.h>

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace mock_cupti {

// Bytes a record of `kind` takes in a buffer; 0 for kinds this mock never writes.
size_t RecordSize(CUpti_ActivityKind kind);

class ActivityBuffers {
 public:
  // A written record whose GPU timestamps are still to come; 0 names none.
  using PendingRecord = uint64_t;

  // After `max_requests` calls to bufferRequested, acts as if it returned no buffer.
  explicit ActivityBuffers(std::optional<size_t> max_requests);
  // Ends the worker thread. Undelivered buffers are forgotten; the object stays valid.
  void Stop();

  void SetCallbacks(CUpti_BuffersCallbackRequestFunc request,
                    CUpti_BuffersCallbackCompleteFunc complete);
  bool HasCallbacks();
  void SetFlushPeriod(uint32_t period_ms);

  // Copies `record` (`size` bytes: a CUPTI record of a kind RecordSize knows) into the current
  // buffer, or drops it and counts it for `context`.
  void Append(const void* record, size_t size, CUcontext context);
  // As Append, for a record completed later by Complete.
  PendingRecord AppendPending(const void* record, size_t size, CUcontext context);
  // Sets the GPU timestamps of a pending record, if its buffer has not been handed over.
  void Complete(PendingRecord pending, uint64_t start, uint64_t end);

  // Hands buffers back on the calling thread (cuptiActivityFlushAll).
  void Flush(bool forced);
  // Returns and resets the count of records dropped for `context` (nullptr: the global queue).
  size_t TakeDropped(CUcontext context);

 private:
  struct Buffer {
    uint64_t id;
    uint8_t* data;
    size_t size;
    size_t max_records;  // 0: as many as fit
    size_t used = 0;
    size_t records = 0;
    size_t pending = 0;  // records still waiting for their GPU timestamps
    bool full = false;   // takes no more records
  };
  enum class Delivery { kFullAndComplete, kComplete, kAll };

  PendingRecord Write(const void* record, size_t size, CUcontext context, bool pending);
  // A buffer with room for `size` bytes, or nullptr; may release `lock` to ask the client.
  Buffer* BufferWithRoom(std::unique_lock<std::mutex>& lock, size_t size);
  void MarkFull(Buffer& buffer);
  Buffer* Find(uint64_t id);
  static bool Deliverable(const Buffer& buffer, Delivery delivery);
  // Removes the buffers `delivery` allows; the caller hands them back without the lock.
  std::vector<Buffer> TakeDeliverable(Delivery delivery);
  void HandBack(const std::vector<Buffer>& buffers);
  void StartWorkerLocked();
  void RunWorker();

  const std::optional<size_t> max_requests_;
  std::mutex mutex_;  // guards everything below; never held while calling the client
  std::condition_variable worker_wake_;
  CUpti_BuffersCallbackRequestFunc request_ = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete_ = nullptr;
  std::list<Buffer> buffers_;   // in fill order; only the last can take records
  std::vector<Buffer> spares_;  // given by the client, not yet written to
  size_t requests_ = 0;
  std::map<CUcontext, size_t> dropped_;
  uint32_t flush_period_ms_ = 0;
  bool worker_started_ = false;
  bool stopping_ = false;
};

}  // namespace mock_cupti
