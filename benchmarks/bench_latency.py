"""Forward-latency profile of the target model: one tree forward of n new tokens on a cached prefix.

Prints milliseconds per forward against n (median over interleaved rounds after a warm-up round, as
:func:`stand_runtime.measure_latency` measures the profile behind ``auto`` trees), the spread between
rounds, and each size's cost as a multiple of a plain 1-token step. Run: ``python benchmarks/bench_latency.py [--model M] [--prefix 512]``.
"""

from __future__ import annotations

import argparse

from stand_runtime import load_model, measure_latency

SIZES = (1, 2, 4, 8, 16, 32, 64, 80, 128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prefix", type=int, default=512)
    args = parser.parse_args()
    model, _ = load_model(args.model)
    profile = measure_latency(model, SIZES, prefix_len=args.prefix)
    print(f"{args.model}, {args.prefix}-token prefix")
    print("new tokens | ms/forward | spread (IQR) ms | x plain step")
    for n, seconds, spread in zip(profile.sizes, profile.seconds, profile.spread):
        print(f"{n:10d} | {seconds * 1e3:10.1f} | {spread * 1e3:15.1f} | {seconds / profile.seconds[0]:6.2f}")


if __name__ == "__main__":
    main()
