"""Float32 1024x1024 matmul: the mlx[cpu] wheel's reference BLAS vs an optimized BLAS.

numpy's wheels link OpenBLAS and torch's CPU wheels link MKL/OpenBLAS, so the
three numbers side by side show what an optimized BLAS behind MLX would buy.
Prints one JSON line per library (best of `--repeat` runs) and the ratios.

    python -m bench.blas_matmul
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import numpy as np


def best_time(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm up
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    a = np.random.default_rng(0).random((args.size, args.size), dtype=np.float32)
    results = {"numpy": best_time(lambda: a @ a, args.repeat)}
    try:
        import mlx.core as mx

        ma = mx.array(a)
        results["mlx"] = best_time(lambda: mx.eval(ma @ ma), args.repeat)
    except ImportError:
        pass
    try:
        import torch

        ta = torch.from_numpy(a)
        results["torch"] = best_time(lambda: ta @ ta, args.repeat)
    except ImportError:
        pass
    for lib, seconds in results.items():
        print(json.dumps({"case": f"matmul_f32_{args.size}", "lib": lib, "ms": round(seconds * 1e3, 2)}))
    if "mlx" in results:
        for lib in ("numpy", "torch"):
            if lib in results:
                print(f"mlx / {lib}: {results['mlx'] / results[lib]:.1f}x slower")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
