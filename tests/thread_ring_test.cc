// ThreadRing's records of variable size (PushSpanning): their bytes come back whole from
// consecutive slots, across the ring's end too, and a ring without room drops and counts.
#include "inject/thread_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

namespace gprof::inject {
namespace {

// The `size` bytes from slot `at` on, wrapping as the writer reads them.
std::string ReadBack(const ThreadRing& ring, uint64_t at, uint64_t size) {
  std::string bytes;
  for (uint64_t slot = at; bytes.size() < size; ++slot) {
    const char* from = reinterpret_cast<const char*>(&ring.slots[slot % ThreadRing::kSlots]);
    bytes.append(from, std::min<uint64_t>(size - bytes.size(), ThreadRing::kSlotBytes));
  }
  return bytes;
}

TEST(ThreadRing, SpanningRecordAcrossTheRingsEndComesBackWhole) {
  auto ring = std::make_unique<ThreadRing>();
  // Two slots before the end: the record's 3 pieces span 5 slots, the last 3 from slot 0.
  const uint64_t start = ThreadRing::kSlots - 2;
  ring->head.store(start);
  ring->tail.store(start);
  const std::string head(ThreadRing::kSlotBytes + 7, 'h'), a(100, 'a'), b(130, 'b');
  ring->PushSpanning({{head.data(), head.size()}, {a.data(), a.size()}, {b.data(), b.size()}});
  const uint64_t size = head.size() + a.size() + b.size();
  EXPECT_EQ(ring->head.load(), start + ThreadRing::SlotsFor(size));
  EXPECT_EQ(ReadBack(*ring, start, size), head + a + b);
  EXPECT_EQ(ring->dropped.load(), 0u);
}

TEST(ThreadRing, SpanningRecordWithoutRoomIsDroppedAndCounted) {
  auto ring = std::make_unique<ThreadRing>();
  ring->head.store(ThreadRing::kSlots - 1);  // one slot free
  const std::string bytes(ThreadRing::kSlotBytes + 1, 'x');
  EXPECT_FALSE(ring->PushSpanning({{bytes.data(), bytes.size()}}));
  EXPECT_EQ(ring->head.load(), ThreadRing::kSlots - 1);
  EXPECT_EQ(ring->dropped.load(), 1u);
}

}  // namespace
}  // namespace gprof::inject
