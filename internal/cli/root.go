// Package cli holds the allot command tree. Commands parse flags and print; the work is
// done by the packages they call.
package cli

import (
	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=...".
var Version = "dev"

// NewRoot builds the allot command.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "allot",
		Short:         "Allot shares a cluster's GPUs fairly among teams",
		Long:          "Allot is a GPU scheduler for AI teams: guaranteed quotas, idle GPUs lent and taken back,\nfractional GPUs, gangs that start whole, and a reason for every job that waits.",
		Version:       Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddGroup(&cobra.Group{ID: "work", Title: "Work with workloads:"}, &cobra.Group{ID: "admin", Title: "See and administer the cluster:"},
		&cobra.Group{ID: "run", Title: "Run Allot:"}, &cobra.Group{ID: "study", Title: "Study and simulate:"})
	root.AddCommand(newSubmitCmd(), newListCmd(), newDescribeCmd(), newLogsCmd(), newExecCmd(), newSuspendCmd(false), newSuspendCmd(true),
		newDeleteCmd(), newConfigCmd(), newQueuesCmd(), newQueueCmd(), newTopCmd(), newDashboardCmd(),
		newUpCmd(), newSchedulerCmd(), newBenchCmd(), newSimCmd())
	return root
}
