// Command allot is the single binary of Allot: scheduler, simulator and tools.
package main

import (
	"fmt"
	"os"

	"github.com/allot-dev/allot/internal/cli"
)

func main() {
	if err := cli.NewRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
