#!/bin/sh
# What ptxas reported when it compiled the hopper kernels (build/cuda/launch.ptxas.log, written by the
# Makefile):
# - no register spills: the consumer loops are sized to fit 240 registers, and a spill inside them costs local
#   memory traffic on every K block;
# - no serialized wgmma (ptxas info C7514 / C7517 / C7518: it could not prove an accumulator idle while a wgmma was
#   in flight, inserted waits, and the MMAs of a block no longer overlap). The kernel stays correct, so no GPU test
#   would notice: the normal path's two-partial loop once ran serialized this way, 949 instead of 787 us at M=4096
#   7168x16384.
#   sh tests/ptxas-check.sh CUDA_OBJDIR WITH_CUDA
dir=${1:-build/cuda}
with_cuda=${2:-1}
if [ "$with_cuda" != 1 ]; then
    echo "ptxas-check: skipped (built without CUDA)"
    exit 0
fi
log=$dir/launch.ptxas.log
if [ ! -f "$log" ]; then
    echo "ptxas-check: FAIL: $log missing (rebuild: rm $dir/launch.o && make)"
    exit 1
fi
awk '
    /Compiling entry function/ {
        fn = $0; sub(/.*hopper_gemm_kernelI/, "hopper_gemm_kernel<", fn); sub(/EEEv.*/, ">", fn); kernels++ }
    /bytes spill stores/ && $5 + 0 > 0 { print "ptxas-check: FAIL: " fn ": " $0; bad++ }
    /Potential Performance Loss|\(C751[0-9]\)/ { print "ptxas-check: FAIL: " $0; bad++ }
    END { if (kernels == 0) { print "ptxas-check: FAIL: no kernels in the log"; exit 1 }
          if (bad) exit 1
          printf "ptxas-check: %d hopper kernel builds, no spills, no serialized wgmma\n", kernels }' "$log"
