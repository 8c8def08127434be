package e2elogs

import (
	"testing"
	"time"
)

// runOf is one run of a test as OnFailure sees it.
type runOf struct {
	testing.TB
	name     string
	failed   bool
	cleanups []func()
}

func (r *runOf) Name() string     { return r.name }
func (r *runOf) Failed() bool     { return r.failed }
func (r *runOf) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *runOf) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestOnFailure(t *testing.T) {
	var diagnosed []string
	diagnose := func(t testing.TB, _ time.Time) { diagnosed = append(diagnosed, t.Name()) }
	// Two runs of the same test (-count=2) that both fail, each registering
	// twice, and a run that passes.
	for _, r := range []*runOf{{name: "TestX", failed: true}, {name: "TestX", failed: true}, {name: "TestY"}} {
		OnFailure(r, diagnose)
		OnFailure(r, diagnose)
		r.end()
	}
	if len(diagnosed) != 2 || diagnosed[0] != "TestX" || diagnosed[1] != "TestX" {
		t.Errorf("diagnosed %v, want each failed run of TestX once", diagnosed)
	}
}
