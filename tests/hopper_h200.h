/* What the H200 (132 SMs) answers for hopper's CSPLIT kernels: clusters of 2..8 CTAs that fit at once (index: CTAs
 * per cluster). test_hopper_plan's golden plans "on the H200" use it; test_hopper compares a device's answer with it. */
#ifndef BFP8_TEST_HOPPER_H200_H
#define BFP8_TEST_HOPPER_H200_H

#include "backends/hopper/plan.h"

static const bfp8_hopper_cluster_fit kH200ClusterFit = {{0, 0, 66, 39, 30, 22, 17, 15, 15}};

#endif
