/* GPU timing for `blockfp8 bench` (tools/cuda_timer.c, its kernels in tools/cuda_timer_kernels.cu). */
#ifndef BFP8_CLI_CUDA_TIMER_H
#define BFP8_CLI_CUDA_TIMER_H

#include "blockfp8.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What cli_cuda_time does to the L2 cache before each timed call. */
typedef enum cli_l2_flush {
    CLI_L2_KEEP = 0,  /* nothing: the call may find its operands in the L2 */
    CLI_L2_CLEAN = 1, /* read a buffer of twice the L2's size: no operand cached, no dirty line left to write back */
    CLI_L2_DIRTY = 2, /* write such a buffer: no operand cached, but the L2 full of dirty lines, which the timed
                         call pays to write back as it evicts them (a flush by writing, e.g. PyTorch's zero_()) */
} cli_l2_flush;

/* Times fn(ctx) with CUDA events on `stream` (the current device): `warmup` untimed calls, then `iters` timed
 * calls, each preceded by the `flush` and a ~100 us GPU spin (BFP8_CUDA_TIME_HOLD_CYCLES clock cycles, default
 * 200000; 0: none), so that enqueueing a call never shows in its time. times_us[i] receives each call's time in
 * microseconds. On failure `why` says what failed: the timer's own step, or fn's bfp8_last_error(); fn's status is
 * returned as it came. Without a device (or CUDA): BFP8_ERR_UNSUPPORTED with the reason. */
bfp8_status cli_cuda_time(bfp8_status (*fn)(void *ctx), void *ctx, int warmup, int iters, cli_l2_flush flush,
                          void *stream, double *times_us, char *why, size_t why_size);

/* cli_cuda_time for several functions at once, interleaved: after `warmup` untimed rounds (each function once),
 * round i times each function once, starting at fns[i % nfns], so that none is always timed first or last and all
 * meet the same clocks and temperature. times_us is [nfns][iters]. On failure `why` says what failed and *failed
 * (unless NULL) is the index of the function whose call failed, or -1 where the timer itself did. */
bfp8_status cli_cuda_time_interleaved(bfp8_status (*const *fns)(void *ctx), void *const *ctxs, int nfns, int warmup,
                                      int iters, cli_l2_flush flush, void *stream, double *times_us, int *failed,
                                      char *why, size_t why_size);

/* (tools/cli_util.c) The median microseconds of fn(ctx) over `iters` runs after `warmup` untimed ones: on CUDA by cli_cuda_time (the
 * L2 treated as `flush`), on the CPU by the host's monotonic clock. On failure `why` says what failed. */
bfp8_status cli_time_median(bfp8_device device, int warmup, int iters, cli_l2_flush flush, bfp8_status (*fn)(void *ctx),
                            void *ctx, double *median_us, char *why, size_t why_size);
/* (tools/cli_util.c) The medians of several functions timed interleaved, as cli_cuda_time_interleaved (on the CPU,
 * the same rounds on the host's clock): median_us[f] for fns[f](ctxs[f]); *failed as there. */
bfp8_status cli_time_medians(bfp8_device device, int warmup, int iters, cli_l2_flush flush,
                             bfp8_status (*const *fns)(void *ctx), void *const *ctxs, int nfns, double *median_us,
                             int *failed, char *why, size_t why_size);

#ifdef __cplusplus
}
#endif
#endif
