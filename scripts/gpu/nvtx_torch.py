"""A small training loop labelled with NVTX, for scripts/gpu/nvtx_torch.sh (issue 39, docs/nvtx.md).

  nvtx_torch.py run STEPS PROFILE_JSON
      trains a small MLP for STEPS steps: torch.cuda.nvtx.range around each step's "data",
      "forward", "backward" and "optimizer", record_function("data") inside "data", and
      torch.autograd.profiler.emit_nvtx() over the whole loop (operators as NVTX ranges). Then
      trains STEPS more under torch.profiler (no emit_nvtx) and writes, per range name, the count
      and total time torch.profiler saw (its user annotations and aten:: operators) to
      PROFILE_JSON, with the steps' count.
  nvtx_torch.py check REPORT_JSON PROFILE_JSON
      compares gprof-run's report.json ("nvtx_ranges") with torch.profiler's figures: the same
      phase names and counts, total times within 2x (the same loop twice in one process: two
      profilers cannot be on at once, and emit_nvtx and torch.profiler each cost their own),
      operators seen by both. Exit 1 on a miss.
"""
import contextlib
import json
import sys
import time


def train(steps, profile_json):
    import torch
    from torch.autograd.profiler import record_function

    torch.manual_seed(0)
    device = "cuda"
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(64, 1024, pin_memory=True)
    target = torch.randint(0, 10, (64,), pin_memory=True)

    def step(label=torch.cuda.nvtx.range):
        with label("data"):
            with record_function("data"):
                x = data.to(device, non_blocking=True)
                y = target.to(device, non_blocking=True)
        with label("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with label("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with label("optimizer"):
            optimizer.step()
        torch.cuda.synchronize()

    # Warm-up, unlabelled: lazy module loading, cuBLAS's handle and the allocator would otherwise
    # land in the first step's ranges, which torch.profiler's run (after it) never sees.
    step(label=lambda name: contextlib.nullcontext())
    started = time.monotonic()
    with torch.autograd.profiler.emit_nvtx():
        for _ in range(steps):
            with torch.cuda.nvtx.range("train_step"):
                step()
    print(f"nvtx_torch: {steps} steps in {time.monotonic() - started:.3f} s")

    # The same loop under torch.profiler, for its view of the same phases.
    totals = {}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            with record_function("train_step"):
                with record_function("data"):
                    x = data.to(device, non_blocking=True)
                    y = target.to(device, non_blocking=True)
                with record_function("forward"):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                with record_function("backward"):
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                with record_function("optimizer"):
                    optimizer.step()
                torch.cuda.synchronize()
    for event in prof.key_averages():
        totals[event.key] = {"count": event.count, "total_ns": int(event.cpu_time_total * 1000)}
    json.dump({"steps": steps, "ranges": totals}, open(profile_json, "w"), indent=1)


def check(report_json, profile_json):
    report = json.load(open(report_json))
    profile = json.load(open(profile_json))
    steps = profile["steps"]
    rows = {}
    for row in report.get("nvtx_ranges", []):
        key = row["name"].split(",")[0]  # emit_nvtx names: "aten::addmm, seq = 12, ..."
        entry = rows.setdefault(key, {"count": 0, "total_ns": 0})
        entry["count"] += row["count"]
        entry["total_ns"] += row["total_ns"]
    status = 0
    print(f"{'name':24} {'gprof count':>11} {'profiler':>9} {'gprof total':>12} {'profiler':>12}")
    for name in ("train_step", "data", "forward", "backward", "optimizer"):
        ours = rows.get(name, {"count": 0, "total_ns": 0})
        theirs = profile["ranges"].get(name, {"count": 0, "total_ns": 0})
        print(f"{name:24} {ours['count']:>11} {theirs['count']:>9} "
              f"{ours['total_ns'] / 1e6:>10.2f}ms {theirs['total_ns'] / 1e6:>10.2f}ms")
        # "data" is both an NVTX range and, under emit_nvtx, record_function's: twice per step.
        want = 2 * steps if name == "data" else steps
        if ours["count"] != want:
            print(f"  MISS: {name}: {ours['count']} ranges, {want} expected")
            status = 1
        if theirs["total_ns"] and name != "data":
            ratio = ours["total_ns"] / theirs["total_ns"]
            if not 0.5 <= ratio <= 2.0:
                print(f"  MISS: {name}: total {ratio:.2f}x torch.profiler's")
                status = 1
    operators = {k for k in rows if k.startswith("aten::")}
    profiled = {k for k in profile["ranges"] if k.startswith("aten::")}
    print(f"operators: {len(operators)} under emit_nvtx, {len(profiled)} in torch.profiler, "
          f"{len(operators & profiled)} in both")
    if not operators or len(operators & profiled) < len(profiled) // 2:
        print("  MISS: emit_nvtx's operators not recorded")
        status = 1
    text = open(report_json.replace("report.json", "report.txt")).read()
    if "RANGES (NVTX)" not in text:
        print("  MISS: no RANGES table in report.txt")
        status = 1
    return status


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        train(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
