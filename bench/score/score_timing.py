"""What bench/score's PyTorch peers share: the best of n timed calls after a warm-up."""
import time


def best_of(f, n=3):
    """The least wall and, separately, the least CPU seconds (process_time: every thread of the
    process) of n calls of f after one more."""
    f()
    wall = cpu = float("inf")
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        f()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu
