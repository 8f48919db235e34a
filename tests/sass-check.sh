#!/bin/sh
# The hopper kernels as assembled for sm_90a (build/cuda/launch.o): each one issues FP8 wgmma (QGMMA) and touches no
# local memory (LDL/STL). The kernels' bodies are guarded by __CUDA_ARCH_FEAT_SM90_ALL, so a build for plain sm_90
# (or a guard gone wrong) compiles them to empty functions that launch, return and leave y unwritten; on a machine
# without a GPU nothing else would notice. No GPU is needed: cuobjdump reads the object file. It comes with the CUDA
# toolkit, or from PyPI with triton (torch's dependency, in the test venv) or nvidia-cuda-cuobjdump.
#   sh tests/sass-check.sh CUDA_OBJDIR WITH_CUDA [VENV]
dir=${1:-build/cuda}
with_cuda=${2:-1}
venv=${3:-.venv}
if [ "$with_cuda" != 1 ]; then
    echo "sass-check: skipped (built without CUDA)"
    exit 0
fi
obj=$dir/launch.o
if [ ! -f "$obj" ]; then
    echo "sass-check: FAIL: $obj missing"
    exit 1
fi
tool=$(command -v cuobjdump 2>/dev/null)
site="$venv/lib/python3*/site-packages"
for t in "${CUDA_HOME:-/usr/local/cuda}/bin/cuobjdump" $site/triton/backends/nvidia/bin/cuobjdump \
    $site/nvidia/cu*/bin/cuobjdump; do
    [ -z "$tool" ] && [ -x "$t" ] && tool=$t
done
if [ -z "$tool" ]; then
    echo "sass-check: skipped (no cuobjdump: not in the CUDA toolkit, nor triton's or nvidia-cuda-cuobjdump's in $venv)"
    exit 0
fi
"$tool" -sass -arch sm_90a "$obj" 2>&1 | awk '
    /Function :/ { hopper = $NF ~ /hopper_gemm_kernel/; if (hopper) { fn = $NF; kernels++; q[fn] = 0; l[fn] = 0 } }
    hopper && /QGMMA/ { q[fn]++ }
    hopper && / (LDL|STL)[. ]/ { l[fn]++ }
    END {
        if (kernels == 0) { print "sass-check: FAIL: no hopper kernels in the sm_90a SASS"; exit 1 }
        for (f in q) {
            if (q[f] == 0) { print "sass-check: FAIL: no QGMMA in " f; bad++ }
            if (l[f] > 0) { print "sass-check: FAIL: " l[f] " local-memory accesses in " f; bad++ }
        }
        if (bad) exit 1
        printf "sass-check: %d hopper kernels for sm_90a, each with QGMMA, none touching local memory\n", kernels
    }'
