#!/usr/bin/env python3
"""Kills `tgi quantize` runs at random moments and counts what they leave behind.

Each of N runs quantizes MODEL to a GGUF file (q4_k_m) or an NF4 directory, chosen at random, into one
output directory (--force), and gets SIGINT or SIGKILL, chosen at random, after a random delay between
0 and 1.2 times a clean run's duration. Then:
  - temporaries left: entries of the output directory other than the two targets: new ones after
    each SIGINT (none expected), after all the kills (SIGKILL leaves its temporary until the next run),
    and after one more clean run of each format (which removes those of dead runs);
  - corrupt outputs: a target present after a kill that differs from a clean run's output (an
    interrupted run must leave the previous complete output or none).

    bench/hostile_quantize.py [--tgi target/release/tgi] [--model models/stories-distill-4l/hf] [-n 40] [--seed 1]
"""

import argparse
import filecmp
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time

FORMATS = {"gguf": ["--type", "q4_k_m"], "nf4": ["--format", "nf4"]}
TARGETS = {"gguf": "out.gguf", "nf4": "out-nf4"}


def quantize(tgi, model, out_dir, fmt):
    """A `tgi quantize` process writing the format's target in out_dir."""
    target = os.path.join(out_dir, TARGETS[fmt])
    args = [tgi, "quantize", model, *FORMATS[fmt], "-o", target, "--force", "--quiet"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def same(a, b):
    """Whether two outputs (files or directories) hold the same bytes."""
    if os.path.isdir(a) != os.path.isdir(b):
        return False
    if not os.path.isdir(a):
        return filecmp.cmp(a, b, shallow=False)
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names
    )


def leftovers(out_dir):
    """Entries of out_dir other than the targets."""
    return sorted(set(os.listdir(out_dir)) - set(TARGETS.values()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tgi", default="target/release/tgi")
    ap.add_argument("--model", default="models/stories-distill-4l/hf")
    ap.add_argument("-n", type=int, default=40, help="runs to kill")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="hostile-quantize-")
    try:
        ref_dir = os.path.join(work, "ref")
        out_dir = os.path.join(work, "out")
        os.mkdir(ref_dir)
        os.mkdir(out_dir)
        duration = {}
        for fmt in FORMATS:
            start = time.monotonic()
            assert quantize(args.tgi, args.model, ref_dir, fmt).wait() == 0, f"clean {fmt} run failed"
            duration[fmt] = time.monotonic() - start
        counts = {"SIGINT": 0, "SIGKILL": 0, "finished first": 0, "corrupt": 0, "left by SIGINT": 0}
        for _ in range(args.n):
            fmt = rng.choice(list(FORMATS))
            sig = rng.choice([signal.SIGINT, signal.SIGKILL])
            before = set(leftovers(out_dir))
            p = quantize(args.tgi, args.model, out_dir, fmt)
            time.sleep(rng.uniform(0, 1.2 * duration[fmt]))
            if p.poll() is None:
                p.send_signal(sig)
                counts[sig.name] += 1
            else:
                counts["finished first"] += 1
            p.wait()
            if sig == signal.SIGINT:
                counts["left by SIGINT"] += len(set(leftovers(out_dir)) - before)
            for f in FORMATS:
                target = os.path.join(out_dir, TARGETS[f])
                if os.path.exists(target) and not same(target, os.path.join(ref_dir, TARGETS[f])):
                    counts["corrupt"] += 1
        after_kills = leftovers(out_dir)
        for fmt in FORMATS:
            assert quantize(args.tgi, args.model, out_dir, fmt).wait() == 0, f"clean {fmt} run failed"
        after_clean = leftovers(out_dir)
        print(f"runs: {args.n} (clean run: " + ", ".join(f"{f} {d:.2f} s" for f, d in duration.items()) + ")")
        print(f"signals: SIGINT {counts['SIGINT']}, SIGKILL {counts['SIGKILL']}; finished first {counts['finished first']}")
        print(f"temporaries left by SIGINT runs: {counts['left by SIGINT']}")
        print(f"temporaries left after the kills: {len(after_kills)}")
        print(f"temporaries left after one more clean run: {len(after_clean)} {after_clean if after_clean else ''}")
        print(f"corrupt outputs seen: {counts['corrupt']}")
        return 1 if after_clean or counts["corrupt"] or counts["left by SIGINT"] else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
