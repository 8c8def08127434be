package main

import (
	"strings"
	"testing"
)

func TestCopyAndSummarize(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		summary  string // what follows the copied input
	}{
		{
			name:    "all passed",
			in:      "=== RUN   TestA\n    a_test.go:1: fine\n--- PASS: TestA (0.01s)\nPASS\nok  \tpkg\t1s\n",
			max:     10,
			summary: "",
		},
		{
			name: "a failure buried under a later test",
			in: "=== RUN   TestA\n    a_test.go:9: boom\n[ 1.0s] cleanup\n--- FAIL: TestA (2.00s)\n" +
				"=== RUN   TestB\n    b_test.go:1: fine\n--- PASS: TestB (0.01s)\nFAIL\n",
			max: 10,
			summary: "\n==== 1 failed test(s): TestA; their output again, the earliest last ====\n\n==== TestA (4 lines) ====\n" +
				"=== RUN   TestA\n    a_test.go:9: boom\n[ 1.0s] cleanup\n--- FAIL: TestA (2.00s)\n",
		},
		{
			name: "of a failed subtest only its own lines, not those of the subtests after it",
			in: "=== RUN   TestA\n=== RUN   TestA/x\n    a_test.go:9: boom\n=== RUN   TestA/y\n    a_test.go:20: fine\n" +
				"--- FAIL: TestA (0.10s)\n    --- FAIL: TestA/x (0.10s)\n    --- PASS: TestA/y (0.10s)\nFAIL\n",
			max: 10,
			summary: "\n==== 1 failed test(s): TestA; their output again, the earliest last ====\n\n==== TestA/x (2 lines) ====\n" +
				"=== RUN   TestA/x\n    a_test.go:9: boom\n",
		},
		{
			name: "the earliest failure ends the output",
			in: "=== RUN   TestA\n    a_test.go:9: first\n--- FAIL: TestA (2.00s)\n" +
				"=== RUN   TestB\n    b_test.go:1: second\n--- FAIL: TestB (0.01s)\nFAIL\n",
			max: 10,
			summary: "\n==== 2 failed test(s): TestA, TestB; their output again, the earliest last ====\n" +
				"\n==== TestB (3 lines) ====\n=== RUN   TestB\n    b_test.go:1: second\n--- FAIL: TestB (0.01s)\n" +
				"\n==== TestA (3 lines) ====\n=== RUN   TestA\n    a_test.go:9: first\n--- FAIL: TestA (2.00s)\n",
		},
		{
			name: "long output keeps its last lines",
			in:   "=== RUN   TestA\nl1\nl2\nl3\n--- FAIL: TestA (0.10s)\n",
			max:  2,
			summary: "\n==== 1 failed test(s): TestA; their output again, the earliest last ====\n\n==== TestA (5 lines, the last 2) ====\n" +
				"l3\n--- FAIL: TestA (0.10s)\n",
		},
		{
			name: "a test that never ended (panic, timeout)",
			in:   "=== RUN   TestA\n--- PASS: TestA (0.01s)\n=== RUN   TestB\npanic: test timed out after 40m0s\n",
			max:  10,
			summary: "\n==== 1 failed test(s): TestB; their output again, the earliest last ====\n\n==== TestB (2 lines) ====\n" +
				"=== RUN   TestB\npanic: test timed out after 40m0s\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			if err := copyAndSummarize(strings.NewReader(tt.in), &out, tt.max); err != nil {
				t.Fatal(err)
			}
			got, ok := strings.CutPrefix(out.String(), tt.in)
			if !ok {
				t.Fatalf("the input is not copied first:\n%s", out.String())
			}
			if got != tt.summary {
				t.Errorf("summary:\n%q\nwant:\n%q", got, tt.summary)
			}
		})
	}
}
