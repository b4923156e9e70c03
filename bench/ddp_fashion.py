#!/usr/bin/python3
"""PyTorch DDP (gloo, CPU) peer of a hetps job, for bench/peer.sh.

usage: ddp_fashion.py --model mlp|mlp-wide|lenet5 (--epochs N | --iterations N)
                      [--workers 2] [--batch 64] [--lr 0.05] [--momentum 0.9]
                      [--dataset DIR] [--seed 1] [--port 29511]
       ddp_fashion.py --compute-only [--device cpu|cuda] [--iterations 200]

The same models as hetps (lib/train/model.cc: layers, He-uniform weights,
zero biases), data (Fashion-MNIST pixels / 255), per-worker batch, SGD with
momentum and iteration count (ceil(shard / batch) per epoch, as hetps
counts), one compute thread per process, BLAS included. Prints one JSON
line: training seconds (first iteration to the last, after the final
all-reduce), samples/s and the test accuracy of rank 0's final model on the
10000 test images.

--compute-only is the peer of bench/model_bench: one process, each model's
forward, backward and SGD step on a synthetic batch that starts in host
memory, best of three runs, in milliseconds per iteration (on the GPU each
iteration ends with a synchronize, as a trainer's does before it pushes).
"""
import argparse
import gzip
import json
import math
import os
import time

# One BLAS thread per process, as hetps' trainers (--cpu_threads=1).
# torch.set_num_threads does not reach the OpenBLAS that Debian's torch
# calls through libblas.so.3: without these, each process's GEMMs use every
# core (mlp-wide: 19.7 ms a step on two cores, 34.9 ms on one). Set before
# numpy and torch load it; spawned workers inherit them.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def load(ds, split):
    def read(name, offset):
        with gzip.open(os.path.join(ds, name)) as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)
    pre = "train" if split == "train" else "t10k"
    x = read(f"{pre}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    y = read(f"{pre}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def he_init(m):
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        fan_in = m.weight[0].numel()
        limit = math.sqrt(6.0 / fan_in)
        nn.init.uniform_(m.weight, -limit, limit)
        nn.init.zeros_(m.bias)


def model_of(name):
    if name in ("mlp", "mlp-wide"):
        h1, h2 = (256, 128) if name == "mlp" else (2048, 2048)
        m = nn.Sequential(nn.Flatten(), nn.Linear(784, h1), nn.ReLU(), nn.Linear(h1, h2),
                          nn.ReLU(), nn.Linear(h2, 10))
    elif name == "lenet5":
        m = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                          nn.Linear(84, 10))
    else:
        raise SystemExit(f"unknown model {name}")
    m.apply(he_init)
    return m


def worker(rank, a, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.workers)
    torch.manual_seed(a.seed)
    x, y = load(a.dataset, "train")
    shard = torch.arange(rank, len(x), a.workers)
    per_epoch = math.ceil(len(shard) / a.batch)
    iterations = a.iterations if a.iterations > 0 else a.epochs * per_epoch
    model = nn.parallel.DistributedDataParallel(model_of(a.model))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    g = torch.Generator().manual_seed(a.seed * 1000 + rank)
    order = shard[torch.randperm(len(shard), generator=g)]
    pos = 0
    dist.barrier()
    start = time.perf_counter()
    for it in range(iterations):
        if pos + a.batch > len(order):
            order = shard[torch.randperm(len(shard), generator=g)]
            pos = 0
        idx = order[pos:pos + a.batch]
        pos += a.batch
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        tx, ty = load(a.dataset, "test")
        with torch.no_grad():
            acc = (model.module(tx).argmax(1) == ty).float().mean().item()
        out.put({"peer": "pytorch-ddp-gloo", "torch": torch.__version__, "model": a.model,
                 "workers": a.workers, "batch": a.batch, "iterations": iterations,
                 "seconds": seconds, "samples_per_s": iterations * a.batch * a.workers / seconds,
                 "test_accuracy": acc})
    dist.destroy_process_group()


def compute_only(a):
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    iterations = a.iterations if a.iterations > 0 else 200
    print(f"torch {torch.__version__} device {a.device}"
          + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else ""))
    print(f"{'model':<10s} {'params':>12s} {'ms/iteration':>14s}")
    for name in ("mlp", "mlp-wide", "lenet5"):
        model = model_of(name).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
        n = max(1, iterations // 8) if name == "mlp-wide" else iterations
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(n):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
                loss.backward()
                opt.step()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
            best = min(best, (time.perf_counter() - start) * 1000 / n)
        params = sum(t.numel() for t in model.parameters())
        print(f"{name:<10s} {params:>12d} {best:>14.3f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model")
    p.add_argument("--compute-only", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--epochs", type=int, default=0)
    p.add_argument("--iterations", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29511)
    a = p.parse_args()
    if a.compute_only:
        compute_only(a)
        return
    if not a.model:
        raise SystemExit("give --model (or --compute-only)")
    if (a.epochs > 0) == (a.iterations > 0):
        raise SystemExit("give exactly one of --epochs and --iterations")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, out)) for r in range(a.workers)]
    for pr in procs:
        pr.start()
    result = out.get()
    for pr in procs:
        pr.join()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
