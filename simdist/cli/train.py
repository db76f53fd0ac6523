"""``simdist train``: the command line over :func:`simdist.train.train`.

Exit status: 0 when every verification holds, 1 when one fails, 2 for bad
arguments or data. Progress goes to standard error, the report to standard
output, and ``--json FILE`` writes it as JSON (``-``: to standard output,
instead of the text).
"""

from __future__ import annotations

import argparse
import sys

from .._errors import InvalidArgument
from ..train import BUGS, PARALLEL, TrainConfig, train
from . import _json

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``train`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    d = TrainConfig()
    p = subparsers.add_parser(
        "train",
        help="train an MLP data-parallel on N ranks on real data, and verify it against one device",
        description=(
            "Train a one-hidden-layer MLP on N ranks, each on its own shard of every global batch "
            "(or, with --parallel tensor, with the hidden layer split across ranks), then verify: "
            "replicas identical to the bit after every step, equal to one device within the summation "
            "bound, deterministic, and (on MPI) equal to the simulator. Exit status 1 when a check fails."
        ),
        epilog="The digits data set comes with scikit-learn: pip install 'simdist[examples]'. See docs/training.md.",
    )
    p.add_argument("-n", "--size", type=int, default=d.size, help=f"number of ranks (default {d.size})")
    p.add_argument("--backend", choices=("sim", "mpi"), default=d.backend, help="simulator (default) or real MPI")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"passes over the training data (default {d.epochs})")
    p.add_argument("--batch-size", type=int, default=None,
                   help="global batch size, split evenly over the ranks (default: the multiple of N nearest 64)")
    p.add_argument("--lr", type=float, default=d.lr, help=f"SGD learning rate (default {d.lr})")
    p.add_argument("--hidden", type=int, default=d.hidden, help=f"hidden units (default {d.hidden})")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the weights, the split and the batches (default 0)")
    p.add_argument("--dataset", choices=("digits", "mnist"), default=d.dataset,
                   help="digits (bundled with scikit-learn; default) or mnist (IDX files in --data-dir)")
    p.add_argument("--data-dir", metavar="DIR", help="directory of the MNIST IDX files")
    p.add_argument("--parallel", choices=PARALLEL, default=d.parallel,
                   help="split the batch (data, default) or the hidden layer (tensor) over the ranks")
    p.add_argument("--dtype", choices=("float32", "float64"), default=d.dtype, help="default float32")
    p.add_argument("--inject-bug", choices=BUGS, help="reproduce a classic data-parallel bug (verification must fail)")
    p.add_argument("--timeout", type=float, default=d.timeout,
                   help=f"seconds without progress before a hang is reported (default {d.timeout:g})")
    p.add_argument("--framework", choices=("graph", "torch"), default="graph",
                   help="simdist's graph (default) or torch: the same MLP in torch with DistributedDataParallel "
                        "(pip install 'simdist[torch]')")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-': to stdout, instead of the text)")
    return p


def run(args) -> int:
    config = TrainConfig(
        size=args.size, backend=args.backend, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        hidden=args.hidden, seed=args.seed, dataset=args.dataset, data_dir=args.data_dir,
        inject_bug=args.inject_bug, parallel=args.parallel, dtype=args.dtype, timeout=args.timeout,
    )
    text = args.json != "-"
    say = (lambda line: print(line, flush=True)) if text else (lambda line: print(line, file=sys.stderr))
    try:
        if args.framework == "torch":
            from ..train._torch import train_torch

            report = train_torch(config, say=say)
        else:
            report = train(config, progress=True, say=say)
    except (InvalidArgument, ImportError) as error:
        message = str(error).removeprefix("train: ")
        print(f"simdist train: error: {message}", file=sys.stderr)
        return 2
    if text:
        _print(report)
    if args.json:
        _json.write(report, args.json)
    return 0 if all(report["verification"].values()) else 1


def _print(report: dict) -> None:
    accuracy, single = report["test_accuracy"], report["single_device_test_accuracy"]
    print(f"trained {report['steps']} steps in {report['train_seconds']:.2f} s: final loss "
          f"{report['final_loss']:.4f}, test accuracy {accuracy:.4f} (one device: {single:.4f})")
    if report["diverged"]:
        print(f"warning: the training diverged (final loss {report['final_loss']}); try a smaller --lr")
    print("verification:")
    for name, ok in report["verification"].items():
        print(f"  {name:<22} {'yes' if ok else 'NO '}  {report['details'][name]['explanation']}")
    print(f"tolerance: {report['tolerance']}")
