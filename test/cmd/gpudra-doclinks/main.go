// Command gpudra-doclinks fails when a relative link of a Markdown file in
// the repository (README.md, docs/, every other *.md) names a file that does
// not exist or a heading that the linked Markdown file does not have.
//
//	gpudra-doclinks [root]   (default: the current directory)
package main

import (
	"fmt"
	"os"

	"github.com/gpudra/gpudra/test/doclinks"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	bad, err := doclinks.Check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpudra-doclinks:", err)
		os.Exit(2)
	}
	for _, b := range bad {
		fmt.Println(b)
	}
	if len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "gpudra-doclinks: %d broken link(s)\n", len(bad))
		os.Exit(1)
	}
}
