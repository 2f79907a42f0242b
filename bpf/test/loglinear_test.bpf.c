//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Runs bpf/include/loglinear.h in the kernel for agent/probe/bpfhist's test:
 * user space fills ll_in, runs the program with BPF_PROG_TEST_RUN, and
 * compares ll_index and ll_slot with Go's loglinear.Index.
 */
#include "nbs.h"
#include "loglinear.h"

#define LL_BATCH 256

__u64 ll_in[LL_BATCH];
__u32 ll_index[LL_BATCH];
__u32 ll_slot[LL_BATCH];

SEC("syscall")
int nbs_ll_test(void *ctx)
{
	for (int i = 0; i < LL_BATCH; i++) {
		ll_index[i] = nbs_ll_index(ll_in[i]);
		ll_slot[i] = nbs_hist_slot(ll_in[i]);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
