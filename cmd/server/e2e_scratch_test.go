package main

import (
	"sync"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func TestScratch(t *testing.T) {
	e := newE2E(t)
	ctx := ctxT(t)
	c := e.admin
	vm := e.vm(e.admin, client.CreateVMRequest{})
	e.exec(c, vm.ID, "true")
	for _, n := range []int{2, 5, 10} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		fails := 0
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Exec(ctx, vm.ID, client.ExecRequest{Command: "echo hi"})
				if err != nil {
					mu.Lock()
					fails++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		t.Logf("%d concurrent: %d failed", n, fails)
	}
	// spawn concurrently
	var wg sync.WaitGroup
	fails := 0
	var mu sync.Mutex
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.SpawnProcess(ctx, vm.ID, client.SpawnRequest{Command: "echo hi"})
			if err != nil {
				mu.Lock()
				fails++
				mu.Unlock()
				t.Log(err)
			}
		}()
	}
	wg.Wait()
	t.Logf("spawn 10 concurrent: %d failed", fails)
}
