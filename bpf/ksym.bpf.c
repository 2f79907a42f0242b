//go:build ignore

// SPDX-License-Identifier: GPL-2.0
/*
 * Names kernel code addresses (drop sites) as "function+0xoff/0xsize" with
 * the kernel's own symbol lookup (printk's %pB, for return addresses), run
 * on demand with BPF_PROG_TEST_RUN: user space fills ksym_addr, runs the
 * program and reads ksym_name. Reading /proc/kallsyms instead costs the
 * kernel ~70 ms of CPU per scan (it formats 120k symbols); this costs
 * microseconds per address.
 *
 * Loaded by agent/probe/drops.
 */
#include "nbs.h"

#define NBS_KSYM_BATCH 16
#define NBS_KSYM_LEN 128

__u64 ksym_addr[NBS_KSYM_BATCH];
char ksym_name[NBS_KSYM_BATCH][NBS_KSYM_LEN];

SEC("syscall")
int nbs_ksym(void *ctx)
{
	for (int i = 0; i < NBS_KSYM_BATCH; i++) {
		__u64 a = ksym_addr[i];

		ksym_name[i][0] = 0;
		if (a)
			bpf_snprintf(ksym_name[i], NBS_KSYM_LEN, "%pB", &a, sizeof(a));
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
