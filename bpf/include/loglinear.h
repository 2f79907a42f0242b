/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The NBS log-linear histogram layout, computed in BPF. It must give exactly
 * the index Go's internal/loglinear.Index gives for every value, so kernel
 * histograms merge with everything else (agent/probe/bpfhist tests this by
 * running the code below in the kernel against the Go function).
 *
 * Values below 16 have a bucket each; above, every power of two is split
 * into 16 equal sub-buckets: index = (e - 3) * 16 + the 4 bits after the top
 * one, where e is the position of the top bit.
 *
 * Kernel maps hold NBS_HIST_BUCKETS buckets (values up to 2^36 ns, 68.7 s,
 * 4 KiB per histogram); nbs_hist_slot() files larger values in the last
 * one, which user space reads as "at least 68.7 s".
 */
#pragma once

#define NBS_LL_SUB_BITS 4
#define NBS_LL_SUB (1 << NBS_LL_SUB_BITS)
#define NBS_HIST_MAX_BITS 36
#define NBS_HIST_BUCKETS ((NBS_HIST_MAX_BITS - NBS_LL_SUB_BITS) * NBS_LL_SUB + NBS_LL_SUB)

/* A histogram as stored in kernel maps (per-CPU values, summed by user
 * space). Bigger than the 512-byte BPF stack: never copy one. */
struct nbs_hist {
	__u64 bucket[NBS_HIST_BUCKETS];
};

/* Position of the top set bit of v (v > 0): a binary search in six steps,
 * since BPF has no count-leading-zeros instruction. */
static __always_inline __u32 nbs_log2(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1)
		r += 1;
	return r;
}

/* The bucket of v: identical to loglinear.Index for every __u64. */
static __always_inline __u32 nbs_ll_index(__u64 v)
{
	__u32 e;

	if (v < NBS_LL_SUB)
		return v;
	e = nbs_log2(v);
	return (e - NBS_LL_SUB_BITS + 1) * NBS_LL_SUB + ((v >> (e - NBS_LL_SUB_BITS)) & (NBS_LL_SUB - 1));
}

/* The slot of v in a kernel-map histogram: its bucket, or the last slot for
 * values beyond the map's range. The explicit bound also tells the verifier
 * the array access is safe. */
static __always_inline __u32 nbs_hist_slot(__u64 v)
{
	__u32 i = nbs_ll_index(v);

	if (i >= NBS_HIST_BUCKETS)
		i = NBS_HIST_BUCKETS - 1;
	return i;
}

/* Count one value. The histogram is a per-CPU map value and tracing programs
 * do not nest on one CPU, so a plain increment is race-free. */
static __always_inline void nbs_hist_record(struct nbs_hist *h, __u64 v)
{
	__u32 i = nbs_hist_slot(v);

	if (i < NBS_HIST_BUCKETS)
		h->bucket[i]++;
}
