"""The GPU timer of the Python baselines (bench/triton_baseline.py, bench/deepgemm_baseline.py): the method of
`blockfp8 bench` (tools/cuda_timer.c), so that their times and blockfp8's compare."""
import statistics

import torch


class Timer:
    """cli_cuda_time's method: flush (write or read 2x the L2), event, call, event; median of iters."""

    def __init__(self, l2):
        props = torch.cuda.get_device_properties(0)
        self.flush_buf = torch.empty(2 * props.L2_cache_size // 4, dtype=torch.int32, device="cuda")
        self.flush_buf.fill_(0x5A5A5A5A)
        self.sink = torch.empty(1, dtype=torch.int32, device="cuda")
        self.l2 = l2
        self.hold_cycles = 200_000  # ~100 µs at the H200's clocks

    def median_us(self, fn, warmup, iters):
        return self.medians_us([fn], warmup, iters)[0]

    def medians_us(self, fns, warmup, iters):
        """The median of each of fns, timed interleaved: round i runs every fn once, starting at fn i % len(fns), so
        that all meet the same conditions and none is timed only right after its own calls (docs/hopper.md, design
        log 92: a kernel timed back to back can run faster than between other kernels' calls)."""
        for fn in fns:
            for _ in range(warmup):
                fn()
        events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                   for _ in range(iters)] for _ in fns]
        for i in range(iters):
            for j in range(len(fns)):
                f = (i + j) % len(fns)
                if self.l2 == "dirty":
                    self.flush_buf.fill_(i)
                else:
                    torch.amax(self.flush_buf, dim=0, keepdim=True, out=self.sink)
                # Keep the GPU busy (untimed) while Python enqueues the launch: a Triton launch costs tens of µs
                # of host time, and without this the events of a small cell would measure it.
                torch.cuda._sleep(self.hold_cycles)
                start, end = events[f][i]
                start.record()
                fns[f]()
                end.record()
        torch.cuda.synchronize()
        return [statistics.median(s.elapsed_time(e) * 1000.0 for s, e in ev) for ev in events]
