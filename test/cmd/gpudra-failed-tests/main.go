// Command gpudra-failed-tests copies `go test -v` output from stdin to
// stdout and, at the end, prints the output of each failed top-level test
// once more. A long e2e run's failure message is otherwise buried under the
// output of the tests that ran after it, and CI shows only the tail.
//
//	go test -v ./test/e2e/ 2>&1 | gpudra-failed-tests
//
// It exits with 0 whatever the tests did: run it under `set -o pipefail`
// so that the exit status is go test's.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := copyAndSummarize(os.Stdin, os.Stdout, maxLines); err != nil {
		fmt.Fprintf(os.Stderr, "gpudra-failed-tests: %v\n", err)
		os.Exit(1)
	}
}
