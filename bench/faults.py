"""Faults: one replica of every tier lost under load, again and again.

    python -m bench.faults [--repetitions 20] [--tiers middleman batcher ...] [--faults ...]

On a stack of its own (simulated GPU, the default in-pod placement, two replicas of middleman,
the batcher and the GPU pod), a closed loop of 8 callers with 10 s deadlines on the public
endpoint; each repetition loses replica 1 of one tier by kill -9 or SIGSTOP, goes on until
Envoy sends it nothing new and 100 more requests were answered, and brings it back (kill -9:
``make scale`` starts a new one; SIGSTOP: SIGCONT). Every request sent is counted, the ones in
flight on the lost replica included (inferline_testing.faults, as tests/e2e/test_faults.py).

The goal: no failed request in any repetition. Detection is how long from the fault until
Envoy sent the replica no new request (kill -9: the reset connections and outlier detection;
SIGSTOP: the health checks, while HTTP/2 PINGs reset what was in flight); a request whose
deadline is shorter than that could fail after a SIGSTOP. Printed, and written to
bench/results/faults.json.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.benchlib import ROOT, local_stack, run_main, write_result
from inferline_stack.config import StackConfig
from inferline_testing import faults, media


async def run(
    config: StackConfig, tiers: list[str], kinds: list[str], repetitions: int
) -> list[faults.FaultRun]:
    images = [media.encode(media.photo(name)[:96, :128]) for name in ("chelsea", "coffee")]
    runs = []
    total = len(tiers) * len(kinds) * repetitions
    for tier in tiers:
        for fault in kinds:
            for repetition in range(repetitions):
                await faults.with_replicas(config)
                run = await faults.lose_one(config, tier, fault, images)
                runs.append(run)
                codes = f" {run.failed} {run.messages}" if run.failed else ""
                print(
                    f"[{len(runs)}/{total}] {tier} {fault} #{repetition + 1}: {run.requests} "
                    f"requests, {sum(run.failed.values())} failed{codes}, detected after "
                    f"{run.detected_s:.2f} s",
                    flush=True,
                )
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", type=int, default=20, help="per tier and fault")
    parser.add_argument(
        "--tiers", nargs="+", choices=list(faults.TIERS), default=list(faults.TIERS)
    )
    parser.add_argument("--faults", nargs="+", choices=faults.FAULTS, default=list(faults.FAULTS))
    args = parser.parse_args(argv)
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")
    repository = str(ROOT / "build" / "model_repository")
    with (
        tempfile.TemporaryDirectory(prefix="inferline-faults-") as tmp,
        local_stack(Path(tmp), model_repository=repository, model="simulated_gpu") as config,
    ):
        runs = asyncio.run(run(config, args.tiers, args.faults, args.repetitions))
    print(faults.table(runs))
    failing = [r for r in runs if r.failed]
    print(f"goal: no failed request in any repetition: {'met' if not failing else 'MISSED'}")
    path = write_result("faults", {"runs": [r.row() for r in runs], "goal_met": not failing})
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
