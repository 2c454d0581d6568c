// Package traces holds the public cluster traces Allot's tests, benchmarks and studies
// read (see README.md for their provenance), and embeds the one the binary needs.
package traces

import (
	_ "embed"
)

// PhillyRuntimes is philly_runtime.csv: job run times in seconds from Microsoft's Philly
// cluster, the default run-time distribution of `allot sim workload`.
//
//go:embed philly_runtime.csv
var PhillyRuntimes []byte

// PhillyRuntimesName names the embedded file in errors and reports.
const PhillyRuntimesName = "traces/philly_runtime.csv (embedded)"
