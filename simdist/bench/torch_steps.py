"""A training step of torch.distributed on the simulator and on Gloo.

    python -m simdist.bench.torch_steps [--ranks 2,4] [--steps 30] [--json out.json]

One script (``step_script`` below) trains an MLP with DDP or FSDP2
(``fully_shard``) and reports the median time of a step on rank 0. It runs
unmodified under ``torchrun --nproc-per-node N`` (Gloo) and under ``simdist
run -n N`` (the simulator: its ``"gloo"`` is a simdist group), one run after
the other, so the ratio compares the two on the same machine at the same
time. Two sizes: 1,072 and 1,082,416 parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

STEP_SCRIPT = '''
import json, sys, time
import torch, torch.distributed as dist

kind, width, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.Tanh(), torch.nn.Linear(width, 16))
if kind == "ddp":
    from torch.nn.parallel import DistributedDataParallel
    model = DistributedDataParallel(model)
else:
    from torch.distributed.fsdp import fully_shard
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 16), torch.randn(32, 16)
times = []
for step in range(steps + 5):
    dist.barrier()
    started = time.perf_counter()
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()
    dist.barrier()
    times.append(time.perf_counter() - started)
if rank == 0:
    params = sum(p.numel() for p in model.parameters())  # FSDP2: DTensors of the whole size
    print("RESULT " + json.dumps({"median_ms": 1e3 * sorted(times[5:])[len(times[5:]) // 2], "params": params}))
dist.destroy_process_group()
'''

#: Hidden widths giving 1,072 and 1,082,416 parameters (16 -> width -> 16).
WIDTHS = {"small": 32, "large": 32_800}


def _launch(launcher: str, ranks: int, script: str, args: list[str]) -> dict:
    if launcher == "gloo":
        # --standalone: a rendezvous on a free port, not the fixed 29500 another job may hold
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), script,
                *args]
    else:
        argv = [sys.executable, "-m", "simdist", "run", "-n", str(ranks), script, *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-6000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    if done.returncode:  # after its result: Gloo's teardown can abort under load ("terminate called ...")
        result["exit_code"] = done.returncode
        print(f"{launcher}: exited {done.returncode} after its result: "
              f"{(done.stderr.strip().splitlines() or [''])[0][:200]}", file=sys.stderr)
    return result


def measure(ranks=(2, 4), steps: int = 30, kinds=("ddp", "fsdp"), widths=None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "step.py")
        with open(script, "w") as out:
            out.write(STEP_SCRIPT)
        for kind in kinds:
            for size, width in (widths or WIDTHS).items():
                for n in ranks:
                    args = [kind, str(width), str(steps)]
                    gloo = _launch("gloo", n, script, args)
                    sim = _launch("simdist", n, script, args)
                    rows.append({"step": kind, "model": size, "params": sim["params"], "ranks": n,
                                 "gloo_ms": gloo["median_ms"], "simdist_ms": sim["median_ms"],
                                 "ratio": sim["median_ms"] / gloo["median_ms"]})
                    print(f"{kind:5} {size:5} ({sim['params']:>9,} parameters) N={n}: Gloo "
                          f"{gloo['median_ms']:7.2f} ms, simdist {sim['median_ms']:7.2f} ms, "
                          f"ratio {rows[-1]['ratio']:.2f}", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    from simdist.torch._launch import require_torch

    require_torch()
    rows = measure(tuple(int(n) for n in args.ranks.split(",")), args.steps)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
