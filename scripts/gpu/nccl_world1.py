"""Issue 37 on the GPU machine: a world-size-1 torch.distributed NCCL loop under gprof-run.

  nccl_world1.py run STEPS        all_reduce STEPS times (and all_to_all_single STEPS times);
                                  prints nccl_version=X.Y.Z
  nccl_world1.py check REPORT_JSON STDOUT STEPS

The check: the injected library was loaded as NCCL's profiler plugin (report.json's `nccl`: the
interface version NCCL used), and each collective record the plugin made has its NCCL kernel on
the GPU timeline, in sequence-number order, launched inside the record's enqueue and started
after it. NCCL handles a communicator of one rank without its enqueue path (ncclLaunchOneRank:
no profiler event), so an all_reduce of one rank may give no record at all: then that is said,
and the NCCL kernels of the GPU timeline are only listed. An NCCL older than 2.24
has no profiler interface gprof-run reads: that is said, and the kernels are only listed.
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
    torch.cuda.synchronize()
    print("nccl_version=" + ".".join(str(v) for v in torch.cuda.nccl.version()))
    dist.destroy_process_group()


def check(report_path, stdout_path, steps):
    report = json.load(open(report_path))
    version = None
    for line in open(stdout_path):
        if line.startswith("nccl_version="):
            version = tuple(int(v) for v in line.strip().split("=")[1].split("."))
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
            print("plugin interface v%d, %d collective records" %
                  (nccl["interface"], nccl["records_total"]))
            records = [r for r in nccl["records"] if r["kind"] == "collective"]
            p2p = [r for r in nccl["records"] if r["kind"] == "p2p"]
            print("%d p2p records (all_to_all_single's sends and receives to itself), %d with "
                  "their kernel" % (len(p2p), len([r for r in p2p if r["kernel"]])))
            if not records:
                print("no collective record: NCCL ran the one-rank collectives without its "
                      "enqueue path (ncclLaunchOneRank), which starts no profiler event")
                records = p2p
            seqs = [r["seq_number"] for r in records if r["seq_number"] is not None]
            if seqs != sorted(seqs):
                misses.append("sequence numbers out of order: %s" % seqs[:20])
            with_kernel = [r for r in records if r["kernel"]]
            inside = [r for r in with_kernel
                      if r["start_ns"] <= r["kernel"]["launch_ns"] <= r["stop_ns"]]
            after = [r for r in with_kernel if r["kernel"]["start_ns"] >= r["start_ns"]]
            print("%d records with their kernel, %d launched inside the enqueue, %d started "
                  "after it" % (len(with_kernel), len(inside), len(after)))
            if records and len(with_kernel) < len(records):
                misses.append("%d records without a kernel" % (len(records) - len(with_kernel)))
            if len(after) < len(with_kernel):
                misses.append("a kernel started before its record")
            starts = [r["kernel"]["start_ns"] for r in with_kernel]
            if starts != sorted(starts):
                misses.append("kernels not in the records' order")
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
