"""A CUDA client for hack/gpucheck/run.sh. Prints one line per fact, prefixed by its name.

  baseline NAME                        SMs, memory, and the speed of a bf16 matrix product
  load SECONDS                         matrix products for that long (utilisation to sample)
  rate NAME SECONDS                    the speed of matrix products over that long, each second
  alloc NAME MAX_MIB [BELOW BEYOND]    also: 256 MiB blocks until refused or MAX_MIB, one
                                       allocation of BELOW MiB and, holding it, one of
                                       BEYOND more; then waits at the barrier in $SYNC
  hold NAME MAX_MIB                    256 MiB blocks until refused or MAX_MIB, held at the
                                       barrier in $SYNC (several clients hold at once)
  fault                                a kernel that writes to address 8 (an MMU fault)
"""
import os
import sys
import time


def say(name, *parts):
    print(name + ":", *parts, flush=True)


def matmul_tflops(torch, name, n=8192, iters=40):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end)
    tflops = 2 * n**3 * iters / (ms / 1e3) / 1e12
    say(name, f"matmul bf16 {n}^3 x{iters}: {ms:.1f} ms, {tflops:.0f} TFLOP/s")
    del a, b
    torch.cuda.empty_cache()


def info(torch, name):
    p = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    env = {k: v for k, v in os.environ.items() if k.startswith(("CUDA_MPS_", "CUDA_DEVICE_", "CUDA_VISIBLE"))}
    say(name, f"pid {os.getpid()} env {env}")
    say(name, f"device {p.name}, multi_processor_count {p.multi_processor_count}, "
        f"mem_get_info free {free >> 20} MiB total {total >> 20} MiB")


def blocks(torch, name, max_mib, block_mib=256):
    held = []
    err = ""
    while (len(held) + 1) * block_mib <= max_mib:
        try:
            held.append(torch.empty(block_mib << 20, dtype=torch.uint8, device="cuda"))
            held[-1].fill_(1)
            torch.cuda.synchronize()
        except Exception as e:  # torch.OutOfMemoryError, or a driver error
            err = str(e).splitlines()[0][:200]
            break
    say(name, f"allocated {len(held)} blocks of {block_mib} MiB = {len(held) * block_mib} MiB"
        + (f", then refused: {err}" if err else f" (stopped at {max_mib} MiB, none refused)"))
    return held


def try_alloc(torch, name, mib):
    try:
        t = torch.empty(mib << 20, dtype=torch.uint8, device="cuda")
        t.fill_(1)
        torch.cuda.synchronize()
        say(name, f"one allocation of {mib} MiB: ok")
        return t
    except Exception as e:
        say(name, f"one allocation of {mib} MiB: refused: {str(e).splitlines()[0][:200]}")
        return None


def barrier(name):
    sync = os.environ.get("SYNC")
    if not sync:
        return
    open(os.path.join(sync, name + ".ready"), "w").close()
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(sync, "done")) and time.time() < deadline:
        time.sleep(0.2)


def main():
    mode = sys.argv[1]
    if mode == "fault":
        import cupy as cp
        k = cp.RawKernel(r'extern "C" __global__ void bad(unsigned long long a) { *(volatile int *)a = 1; }', "bad")
        k((1,), (1,), (cp.uint64(8),))
        try:
            cp.cuda.runtime.deviceSynchronize()
            say("fault", "no error")
        except Exception as e:
            say("fault", f"the kernel failed as meant: {e}")
        return
    import torch
    if mode == "rate":
        name, seconds = sys.argv[2], float(sys.argv[3])
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        a @ a
        torch.cuda.synchronize()
        start = time.time()
        per_second, n, mark, count = [], 0, start, 0
        while time.time() - start < seconds:
            for _ in range(10):
                a @ a
            torch.cuda.synchronize()
            n += 10
            count += 10
            if time.time() - mark >= 1:
                per_second.append(round(2 * 8192**3 * count / (time.time() - mark) / 1e12))
                mark, count = time.time(), 0
        took = time.time() - start
        say(name, f"matmul bf16 8192^3 for {took:.1f} s: {2 * 8192**3 * n / took / 1e12:.0f} TFLOP/s; "
            f"each second: {per_second}")
        return
    if mode == "load":
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        end = time.time() + float(sys.argv[2])
        n = 0
        if os.environ.get("SYNC"):
            open(os.path.join(os.environ["SYNC"], "load.ready"), "w").close()
        while time.time() < end:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
            n += 20
        say("load", f"{n} products of 8192^3 in {sys.argv[2]} s")
        return
    name = sys.argv[2]
    torch.backends.cuda.matmul.allow_tf32 = True
    info(torch, name)
    if mode == "baseline":
        matmul_tflops(torch, name)
        return
    max_mib = int(sys.argv[3])
    if mode == "hold":
        held = blocks(torch, name, max_mib)
        free, total = torch.cuda.mem_get_info()
        say(name, f"held {len(held) * 256} MiB of {max_mib} MiB asked; mem_get_info free {free >> 20} MiB of {total >> 20} MiB")
        barrier(name)
        del held
        return
    held = blocks(torch, name, max_mib)
    del held
    torch.cuda.empty_cache()
    # Below the limit, then beyond it with that still held.
    below = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    beyond = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    if below:
        t1 = try_alloc(torch, name, below)
        if beyond:
            try_alloc(torch, name, beyond)
        del t1
        torch.cuda.empty_cache()
    matmul_tflops(torch, name)
    keep = try_alloc(torch, name, 512)  # held while the others look
    barrier(name)
    del keep


if __name__ == "__main__":
    main()
