//go:build e2e

package e2e

import (
	"errors"
	"sync"
	"testing"
	"time"

	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// How BenchmarkDRASock compares drivers: each case's cycles are run in
// blocks that alternate between the drivers, and the order of the drivers
// flips every round, so that a change of the machine's speed during a case
// (the development VM's CPU time per cycle moved threefold between two runs
// 12 minutes apart) reaches both alike instead of falling on whichever ran
// second. CPU time is summed over each driver's own blocks; the plugin's
// metrics are read only before the first and after the last block, since a
// scrape costs the plugin CPU.

// caseRun is what one driver did in one case.
type caseRun struct {
	n            int // cycles asked for
	cycles       int // prepare+unprepare cycles run
	claims       int // claim cycles (a cycle of 8 claims counts 8)
	prep, unprep []time.Duration
	elapsed      time.Duration // wall time of its blocks
	use          usage
}

// blockFunc runs cycles cycles on t, adding to r.
type blockFunc func(t *drasockTarget, cycles int, r *caseRun) error

// runInterleaved runs n cycles per target, split into the given number of
// blocks per target, alternating between the targets.
func runInterleaved(b *testing.B, targets []*drasockTarget, n, blocks int, block blockFunc) []*caseRun {
	runs := make([]*caseRun, len(targets))
	for i, t := range targets {
		runs[i] = &caseRun{n: n, use: usage{before: t.probe.scrape(b)}}
	}
	blocks = min(blocks, n)
	for k := 0; k < blocks; k++ {
		cycles := n/blocks + boolInt(k < n%blocks)
		for j := range targets {
			i := j
			if k%2 == 1 { // flip the order every round
				i = len(targets) - 1 - j
			}
			t, r := targets[i], runs[i]
			before, start := t.probe.cpu(b), time.Now()
			if err := block(t, cycles, r); err != nil {
				b.Fatal(err)
			}
			r.elapsed += time.Since(start)
			r.use.addSpan(before, t.probe.cpu(b))
		}
	}
	for i, t := range targets {
		runs[i].use.after = t.probe.scrape(b)
	}
	return runs
}

// sequentialCycles prepares and unprepares claims one call at a time.
func sequentialCycles(claimsOf func(t *drasockTarget) []*drapb.Claim) blockFunc {
	return func(t *drasockTarget, cycles int, r *caseRun) error {
		claims := claimsOf(t)
		for i := 0; i < cycles; i++ {
			p, u, err := cycle(t.dra, claims...)
			if err != nil {
				return err
			}
			r.prep, r.unprep = append(r.prep, p), append(r.unprep, u)
			r.cycles++
			r.claims += len(claims)
		}
		return nil
	}
}

// parallelCallers has 8 callers, each cycling its own 1-GPU claim, share
// the block's cycles (rounded up to a multiple of 8).
func parallelCallers(t *drasockTarget, cycles int, r *caseRun) error {
	per := (cycles + 7) / 8
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := 0; w < 8; w++ {
		wg.Go(func() {
			for i := 0; i < per && errs[w] == nil; i++ {
				_, _, errs[w] = cycle(t.dra, t.single[w])
			}
		})
	}
	wg.Wait()
	r.cycles += per * 8
	r.claims += per * 8
	return errors.Join(errs...)
}

// reportLatencies reports a sequential case's figures.
func (r *caseRun) reportLatencies(b *testing.B) {
	r.use.report(b, r.cycles, r.claims)
	report(b, "prepare", r.prep)
	report(b, "unprepare", r.unprep)
}

// reportThroughput reports the parallel callers' figures.
func (r *caseRun) reportThroughput(b *testing.B) {
	b.ReportMetric(float64(r.cycles)/r.elapsed.Seconds(), "cycles/s")
	r.use.report(b, r.cycles, r.claims)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
