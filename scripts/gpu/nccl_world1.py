"""Issue 37 on the GPU machine: a world-size-1 torch.distributed NCCL loop under gprof-run.

  nccl_world1.py run STEPS        all_reduce, all_to_all_single and all_to_all STEPS times
                                  each, then STEPS groups of ncclSend + ncclRecv to itself on a
                                  communicator of its own (NCCL called through ctypes); prints
                                  nccl_version=X.Y.Z and p2p_steps=N
  nccl_world1.py check REPORT_JSON STDOUT STEPS

The check: the injected library was loaded as NCCL's profiler plugin (report.json's `nccl`: the
interface version NCCL used), and each record the plugin made has its NCCL kernel on the GPU
timeline, launched by the record's thread just before the record started (NCCL starts its events
after the launch) and started on the GPU after that launch, the kernels in the records' order.
NCCL hands a one-rank communicator's collectives to ncclLaunchOneRank before any profiler event
(src/enqueue.cc, taskAppend: a copy, or nothing in place), and torch built with NCCL 2.28 or
later sends all_to_all_single to ncclAlltoAll, which goes the same way: so the records come from
the sends and receives to itself, which NCCL does enqueue (one ncclDevKernel_SendRecv kernel and
a P2p record each per group): all_to_all's (a list of tensors: torch's nccl::all2all) and ours. An NCCL older than
2.24 has no profiler interface gprof-run reads: that is said, and the kernels are only listed.
Exits 1 on a miss.
"""
import json
import os
import sys


def run(steps):
    import torch
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    x = torch.ones(1 << 16, device="cuda")
    y = torch.empty_like(x)
    for _ in range(steps):
        dist.all_reduce(x)
    for _ in range(steps):
        dist.all_to_all_single(y, x)
    for _ in range(steps):
        dist.all_to_all([y], [x])
    torch.cuda.synchronize()
    print("nccl_version=" + ".".join(str(v) for v in torch.cuda.nccl.version()))
    dist.destroy_process_group()
    print("p2p_steps=%d" % send_recv_to_self(torch, x, y, steps), flush=True)


def send_recv_to_self(torch, x, y, steps):
    """NCCL's own send and receive to itself, STEPS groups: the records a one-rank job can have.
    Returns the steps run (0 where torch's NCCL cannot be loaded by its soname)."""
    import ctypes
    try:
        nccl = ctypes.CDLL("libnccl.so.2")  # torch's, already loaded
    except OSError as error:
        print("no libnccl.so.2 to call:", error)
        return 0

    class UniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_char * 128)]

    uid = UniqueId()
    comm = ctypes.c_void_p()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    float32 = 7
    for _ in range(steps):
        assert nccl.ncclGroupStart() == 0
        assert nccl.ncclSend(ctypes.c_void_p(x.data_ptr()), ctypes.c_size_t(x.numel()), float32,
                             0, comm, stream) == 0
        assert nccl.ncclRecv(ctypes.c_void_p(y.data_ptr()), ctypes.c_size_t(y.numel()), float32,
                             0, comm, stream) == 0
        assert nccl.ncclGroupEnd() == 0
    torch.cuda.synchronize()
    nccl.ncclCommDestroy(comm)
    return steps


def check_records(nccl, p2p_steps, misses):
    records = nccl["records"]
    collectives = [r for r in records if r["kind"] == "collective"]
    p2p = [r for r in records if r["kind"] == "p2p"]
    print("plugin interface v%d, %d records: %d collective, %d send/receive" %
          (nccl["interface"], nccl["records_total"], len(collectives), len(p2p)))
    if not collectives:
        print("no collective record: NCCL ran the one-rank collectives without its enqueue path "
              "(ncclLaunchOneRank), which starts no profiler event")
    if len(p2p) < 2 * p2p_steps:
        misses.append("%d send/receive records for %d groups of a send and a receive to itself" %
                      (len(p2p), p2p_steps))
    with_kernel = [r for r in records if r["kernel"]]
    print("%d records with their kernel: %s" %
          (len(with_kernel), sorted({r["kernel"]["name"][:50] for r in with_kernel})))
    if len(with_kernel) < len(records):
        misses.append("%d records without a kernel" % (len(records) - len(with_kernel)))
    launched_before = [r for r in with_kernel if r["kernel"]["launch_ns"] is not None
                       and r["kernel"]["launch_ns"] <= r["start_ns"]]
    # Just after the launch call returned (a first launch may take ms: it loads the module).
    close = [r for r in launched_before
             if r["start_ns"] - max(r["kernel"]["launch_end_ns"], r["kernel"]["launch_ns"])
             < 5_000_000]
    ran_after = [r for r in with_kernel if r["kernel"]["launch_ns"] is not None
                 and r["kernel"]["start_ns"] >= r["kernel"]["launch_ns"]]
    print("%d launched before their record (%d started within 5 ms of the launch's return), %d "
          "started on the GPU after their launch" %
          (len(launched_before), len(close), len(ran_after)))
    gaps = sorted(r["start_ns"] - r["kernel"]["launch_end_ns"] for r in launched_before)
    if gaps:
        print("record start after the launch's return: median %.1f us, max %.1f us" %
              (gaps[len(gaps) // 2] / 1e3, gaps[-1] / 1e3))
    if len(launched_before) < len(with_kernel) or len(close) < len(with_kernel):
        misses.append("a record whose kernel was not launched just before it")
    if len(ran_after) < len(with_kernel):
        misses.append("a kernel that started on the GPU before its launch")
    for pid in {r["pid"] for r in with_kernel}:
        starts = [r["kernel"]["start_ns"] for r in with_kernel if r["pid"] == pid]
        if starts != sorted(starts):
            misses.append("kernels of pid %d not in the records' order" % pid)
    by_func = {}
    for r in collectives:
        if r["seq_number"] is not None:
            by_func.setdefault((r["comm_hash"], r["func"]), []).append(r["seq_number"])
    for key, seqs in by_func.items():
        if seqs != sorted(seqs):
            misses.append("sequence numbers of %s out of order: %s" % (key, seqs[:20]))


def check(report_path, stdout_path, steps):
    report = json.load(open(report_path))
    version = None
    p2p_steps = 0
    for line in open(stdout_path):
        if line.startswith("nccl_version="):
            version = tuple(int(v) for v in line.strip().split("=")[1].split("."))
        if line.startswith("p2p_steps="):
            p2p_steps = int(line.strip().split("=")[1])
    misses = []
    kernels = [k for k in report["tables"]["gpu_kernels"] if "nccl" in k["name"].lower()
               or "onerank" in k["name"].lower()]
    print("NCCL", version, "; its kernels on the GPU timeline:",
          [(k["name"][:60], k["count"]) for k in kernels])
    if version is None:
        misses.append("the program printed no NCCL version")
    elif version < (2, 24):
        print("NCCL %d.%d has no profiler plugin interface gprof-run reads" % version[:2])
    else:
        nccl = report.get("nccl")
        if nccl is None:
            misses.append("no NCCL plugin record: NCCL did not load the injected library")
        else:
            check_records(nccl, p2p_steps, misses)
    if sum(k["count"] for k in kernels) < steps:
        # One rank's in-place reduction may need no kernel at all: said, not counted a miss.
        print("note: fewer NCCL kernels than all_reduce steps")
    for miss in misses:
        print("MISS:", miss)
    print("OK" if not misses else "FAILED")
    return 1 if misses else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(int(sys.argv[2]))
    else:
        sys.exit(check(sys.argv[2], sys.argv[3], int(sys.argv[4])))
