// The kernel recorder's CUDA driver calls (GPROF_REC_CUDA_PROBE_CALL, gprof-run -p): each becomes
// a CUDA call of the session as an injected library's would, with its thread, name, duration and
// result, and its user stack at the entry as the call's native stack.
#include <cstring>

#include "collector/session/kernel_events_records.h"
#include "inject/format/kernel_events.h"

namespace gprof::collector {

void KernelRecordDecoder::DecodeCudaProbeCall(const RecordView& record) {
  gprof_cuda_probe_call call;
  if (!ReadRecord(record.bytes, &call)) return Malformed(record, "CUDA call (uprobe)");
  if (call.exit_ns < call.enter_ns)
    return Malformed(record, "CUDA call (uprobe; exit before enter)");
  std::string name(FixedString(call.name, sizeof(call.name)));
  if (name.empty()) name = "cu?";
  auto [entry, inserted] = probe_api_names_.try_emplace(name, 0);
  if (inserted) {
    entry->second = static_cast<uint32_t>(session_->api_names.size());
    session_->api_names.push_back(PrintableName(name));
  }
  session_->api_calls.push_back(ApiCall{call.enter_ns, call.exit_ns, 0, 0, call.pid, call.tid,
                                        entry->second, call.return_value, 0});
  threads_->SeeThread(call.tid, call.pid);
  if (call.user_stack_id >= 0)
    probe_call_stacks_[{call.tid, call.enter_ns}] = {call.pid, call.user_stack_id};
}

void KernelRecordDecoder::FinishCudaProbeCalls() {
  for (const auto& [key, value] : probe_call_stacks_) {
    auto stack = session_->user_stacks.find(value.second);
    if (stack == session_->user_stacks.end() || session_->call_stacks.contains(key)) continue;
    NativeStack native;
    native.pid = value.first;
    native.ips = stack->second.ips;
    native.time_ns = key.second;
    if (stack->second.truncated)
      native.cut_short = "truncated: the kernel's stack walk stopped at its depth";
    session_->call_stacks.emplace(key, std::move(native));
  }
  probe_call_stacks_.clear();
}

}  // namespace gprof::collector
