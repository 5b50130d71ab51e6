// The categories and annotation names of every writer of events (the time-ordered merge, the
// diagnosis, signals, the "gprof-run" track), interned before any event is written.
#pragma once

#include <cstdint>
#include <string_view>

#include "collector/writers/perfetto/interners.h"

namespace gprof::collector::perfetto {

// The fixed strings of the trace: categories and annotation names, interned once.
struct Vocabulary {
  explicit Vocabulary(StringInterner& interner)
      : cuda(interner.Intern(InternTable::kCategories, "cuda")),
        sched(interner.Intern(InternTable::kCategories, "sched")),
        futex(interner.Intern(InternTable::kCategories, "futex")),
        gprof_run(interner.Intern(InternTable::kCategories, "gprof-run")),
        gpu(interner.Intern(InternTable::kCategories, "gpu")),
        kernel(interner.Intern(InternTable::kCategories, "kernel")),
        signal(interner.Intern(InternTable::kCategories, "signal")),
        nvtx(interner.Intern(InternTable::kCategories, "nvtx")),
        nccl(interner.Intern(InternTable::kCategories, "nccl")),
        stream(Name(interner, "stream")),
        correlation_id(Name(interner, "correlation_id")),
        return_code(Name(interner, "return_code")),
        recorded_duration_ns(Name(interner, "recorded_duration_ns")),
        state(Name(interner, "state")),
        still_off_cpu_at_end(Name(interner, "still_off_cpu_at_end")),
        waker(Name(interner, "waker")),
        op(Name(interner, "op")),
        uaddr(Name(interner, "uaddr")),
        uaddr2(Name(interner, "uaddr2")),
        val(Name(interner, "val")),
        timeout_ns(Name(interner, "timeout_ns")),
        return_value(Name(interner, "return")),
        count(Name(interner, "count")),
        file(Name(interner, "file")),
        offset(Name(interner, "offset")),
        grid(Name(interner, "grid")),
        block(Name(interner, "block")),
        registers_per_thread(Name(interner, "registers_per_thread")),
        shared_memory_bytes(Name(interner, "shared_memory_bytes")),
        graph_id(Name(interner, "graph_id")),
        graph_node_id(Name(interner, "graph_node_id")),
        bytes(Name(interner, "bytes")),
        from(Name(interner, "from")),
        to(Name(interner, "to")),
        async(Name(interner, "async")),
        value(Name(interner, "value")),
        memory(Name(interner, "memory")),
        sync_type(Name(interner, "type")),
        event(Name(interner, "event")),
        overlapped_next_ns(Name(interner, "overlapped_next_ns")),
        location(Name(interner, "location")),
        uaddrs(Name(interner, "uaddrs")),
        lock(Name(interner, "lock")),
        lock_kind(Name(interner, "lock_kind")),
        owner(Name(interner, "owner")),
        owner_inferred(Name(interner, "owner_inferred")),
        explanation(Name(interner, "explanation")),
        cause(Name(interner, "cause")),
        cause_rank(Name(interner, "cause_rank")),
        fd(Name(interner, "fd")),
        request(Name(interner, "request")),
        length(Name(interner, "length")),
        address(Name(interner, "address")),
        prot(Name(interner, "prot")),
        flags(Name(interner, "flags")),
        major(Name(interner, "major")),
        outcome(Name(interner, "outcome")),
        nvtx_range(Name(interner, "nvtx_range")),
        still_open_at_end(Name(interner, "still_open_at_end")),
        seq_number(Name(interner, "seq_number")),
        comm_hash(Name(interner, "comm_hash")),
        rank(Name(interner, "rank")),
        n_ranks(Name(interner, "n_ranks")),
        peer(Name(interner, "peer")) {}

  static uint64_t Name(StringInterner& interner, std::string_view name) {
    return interner.Intern(InternTable::kAnnotationNames, name);
  }

  // Categories.
  uint64_t cuda, sched, futex, gprof_run, gpu, kernel, signal, nvtx, nccl;
  // Annotation names.
  uint64_t stream, correlation_id, return_code, recorded_duration_ns;
  uint64_t state, still_off_cpu_at_end, waker;
  uint64_t op, uaddr, uaddr2, val, timeout_ns, return_value;
  uint64_t count, file, offset;
  uint64_t grid, block, registers_per_thread, shared_memory_bytes, graph_id, graph_node_id;
  uint64_t bytes, from, to, async, value, memory, sync_type, event, overlapped_next_ns;
  uint64_t location, uaddrs;
  uint64_t lock, lock_kind, owner, owner_inferred, explanation, cause, cause_rank, fd, request,
      length, address, prot, flags, major, outcome;
  uint64_t nvtx_range, still_open_at_end;
  uint64_t seq_number, comm_hash, rank, n_ranks, peer;  // an NCCL collective's
};

}  // namespace gprof::collector::perfetto
