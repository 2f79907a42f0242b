package bpfload

import (
	"sync"

	"github.com/cilium/ebpf/btf"
)

// KernelBTF shares the running kernel's BTF among the loads of an agent's
// start, then lets it go.
//
// Every load needs kernel BTF (CO-RE relocations, tp_btf targets, kfuncs,
// the probes' reason names), and cilium/ebpf reads and decodes it afresh
// for each load it is not given a cache for: ten times at the agent's
// start, 40% of its start-up CPU. Kept for the agent's lifetime, though,
// the decoded types would hold megabytes for nothing, since every program
// is loaded at start (triggered ones too; they only attach later). So the
// agent releases it once its sources are open, and a load after that reads
// BTF afresh, as without a KernelBTF.
//
// A nil *KernelBTF shares nothing. It is safe for concurrent use.
type KernelBTF struct {
	mu    sync.Mutex
	cache *btf.Cache
}

// NewKernelBTF returns a KernelBTF that reads BTF on first use.
func NewKernelBTF() *KernelBTF { return &KernelBTF{cache: btf.NewCache()} }

// Cache is the shared cache for ebpf.CollectionOptions, nil when there is
// none (k is nil or released): cilium/ebpf then reads BTF for that load.
func (k *KernelBTF) Cache() *btf.Cache {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cache
}

// Spec returns the kernel's BTF, shared while k holds it.
func (k *KernelBTF) Spec() (*btf.Spec, error) {
	if c := k.Cache(); c != nil {
		return c.Kernel()
	}
	return btf.LoadKernelSpec()
}

// Release lets the shared BTF go; later loads read their own.
func (k *KernelBTF) Release() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cache = nil
}
