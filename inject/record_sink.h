// Where encoders put finished session-file records (the writer's staging buffer).
#pragma once

#include <cstddef>

namespace gprof::inject {

class RecordSink {
 public:
  // One record: `head` (a record struct, header filled in) then `tail_size` bytes of `tail`.
  virtual void Append(const void* head, size_t head_size, const void* tail = nullptr,
                      size_t tail_size = 0) = 0;

 protected:
  ~RecordSink() = default;
};

}  // namespace gprof::inject
