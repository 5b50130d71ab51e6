#include "collector/session/native_stack_records.h"

#include <algorithm>

#include "inject/format/kernel_events.h"

namespace gprof::collector {
namespace {

// Copies held for a later maps snapshot, at most: past it they are unwound with the maps at hand
// (each holds up to GPROF_NATIVE_STACK_MAX_BYTES).
constexpr size_t kMaxPending = 2048;

}  // namespace

void NativeStackDecoder::Decode(const RecordView& record) {
  gprof_native_stack raw;
  if (!ReadRecord(record.bytes, &raw) || raw.copied_bytes > record.bytes.size() - sizeof(raw) ||
      raw.copied_bytes > GPROF_NATIVE_STACK_MAX_BYTES) {
    session_->diagnostics.push_back({path_, record.chunk_offset,
                                     "malformed native stack record skipped (" +
                                         RecordPlace(record) + ")"});
    return;
  }
  session_->native.record_bytes += record.bytes.size();
  if (raw.kind != GPROF_NATIVE_SAMPLE && raw.kind != GPROF_NATIVE_WAKER &&
      raw.kind != GPROF_NATIVE_CUDA_CALL)
    return;  // a newer kind
  Copy copy;
  copy.kind = raw.kind;
  copy.key_tid = raw.key_tid;
  copy.key_ns = raw.key_ns;
  copy.in_kernel = (raw.flags & GPROF_NATIVE_IN_KERNEL) != 0;
  copy.copy.pid = raw.pid;
  copy.copy.tid = raw.tid;
  copy.copy.enter_ns = raw.time_ns;
  copy.copy.capture_ns = raw.time_ns;
  copy.copy.rip = raw.ip;
  copy.copy.rsp = raw.sp;
  copy.copy.rbp = raw.bp;
  copy.copy.requested_bytes = raw.requested_bytes;
  copy.copy.own_frames_on_top = false;
  const uint8_t* bytes = record.bytes.data() + sizeof(raw);
  copy.copy.bytes.assign(bytes, bytes + raw.copied_bytes);
  if (!Unwind(copy, pending_.size() >= kMaxPending)) pending_.push_back(std::move(copy));
}

bool NativeStackDecoder::Unwind(const Copy& copy, bool final) {
  if (unwinder_ == nullptr) unwinder_ = std::make_unique<StackUnwinder>(*session_);
  auto start = std::chrono::steady_clock::now();
  std::optional<NativeStack> stack = unwinder_->Unwind(copy.copy, final);
  session_->native.unwind_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  if (!stack) return false;
  ++session_->native.unwound;
  Keep(copy, std::move(*stack));
  return true;
}

void NativeStackDecoder::Keep(const Copy& copy, NativeStack stack) {
  NativeStackRecord& native = session_->native;
  auto [it, inserted] = stack_index_.try_emplace({stack.pid, stack.ips},
                                                 static_cast<uint32_t>(native.stack_set.size()));
  if (inserted) native.stack_set.push_back(std::move(stack));
  if (copy.kind == GPROF_NATIVE_CUDA_CALL) {
    // A slow CUDA call's, as the injected library's native stack of a slow call.
    session_->call_stacks[{copy.key_tid, copy.key_ns}] = native.stack_set[it->second];
  } else if (copy.kind == GPROF_NATIVE_SAMPLE) {
    native.samples.push_back(
        {copy.copy.capture_ns, copy.copy.pid, copy.copy.tid, it->second, copy.in_kernel});
  } else {
    native.wakers[{copy.key_tid, copy.key_ns, copy.copy.capture_ns}] = it->second;
  }
}

void NativeStackDecoder::Finish() {
  for (const Copy& copy : pending_) Unwind(copy, /*final=*/true);
  pending_.clear();
  std::vector<NativeSample>& samples = session_->native.samples;
  std::stable_sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
    return std::pair(a.tid, a.time_ns) < std::pair(b.tid, b.time_ns);
  });
}

}  // namespace gprof::collector
