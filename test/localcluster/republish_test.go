package localcluster

import "testing"

func TestRepublished(t *testing.T) {
	before := map[string]poolState{
		"a": {pod: "a1", generation: 1},
		"b": {pod: "b1", generation: 3},
		"c": {pod: "", generation: 2}, // plugin stopped there
		"d": {pod: "d1"},              // no pool yet (a new node)
	}
	for _, tc := range []struct {
		name string
		now  map[string]poolState
		ok   bool
	}{
		{"nothing replaced", map[string]poolState{"a": {pod: "a1", generation: 1}, "b": {pod: "b1", generation: 3}}, true},
		{"replaced, not republished yet", map[string]poolState{"a": {pod: "a2", generation: 1}, "b": {pod: "b1", generation: 3}}, false},
		{"replaced and republished", map[string]poolState{"a": {pod: "a2", generation: 2}, "b": {pod: "b2", generation: 4}}, true},
		{"one of two republished", map[string]poolState{"a": {pod: "a2", generation: 2}, "b": {pod: "b2", generation: 3}}, false},
		{"replaced pod not running yet", map[string]poolState{"a": {generation: 1}, "b": {pod: "b1", generation: 3}}, true},
		{"nodes without a pool or plugin before", map[string]poolState{"c": {pod: "c1", generation: 2}, "d": {pod: "d2", generation: 1}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := republished(before, tc.now)
			if (err == nil) != tc.ok {
				t.Fatalf("republished: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
