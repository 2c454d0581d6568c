// Package cli holds the allot command tree. Commands parse flags and print; the work is
// done by the packages they call.
package cli

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=..." (make
// build: git describe). A plain go build prints the commit Go recorded, if any.
var Version = "dev"

func version() string {
	if Version != "dev" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev (commit " + s.Value[:12] + ")"
			}
		}
	}
	return Version
}

// NewRoot builds the allot command.
func NewRoot() *cobra.Command {
	// Cobra offers every command the flags of pflag's global set, where Kubernetes's
	// component-base registers its own --version (a non-bool that breaks ours) as the
	// scheduler framework is linked in. Allot's flags are all its commands' own.
	pflag.CommandLine = pflag.NewFlagSet("allot", pflag.ContinueOnError)
	root := &cobra.Command{
		Use:           "allot",
		Short:         "Allot shares a cluster's GPUs fairly among teams",
		Long:          "Allot is a GPU scheduler for AI teams: guaranteed quotas, idle GPUs lent and taken back,\nfractional GPUs, gangs that start whole, and a reason for every job that waits.",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.AddGroup(&cobra.Group{ID: "work", Title: "Work with workloads:"}, &cobra.Group{ID: "admin", Title: "See and administer the cluster:"},
		&cobra.Group{ID: "run", Title: "Run Allot:"}, &cobra.Group{ID: "study", Title: "Study and simulate:"})
	root.AddCommand(newSubmitCmd(), newListCmd(), newDescribeCmd(), newLogsCmd(), newExecCmd(), newBashCmd(), newOpenCmd(), newPortForwardCmd(), newSuspendCmd(false), newSuspendCmd(true),
		newDeleteCmd(), newConfigCmd(), newQueuesCmd(), newQueueCmd(), newClustersCmd(), newImportCmd(), newReportCmd(), newTopCmd(), newDashboardCmd(),
		newUpCmd(), newSchedulerCmd(), newAgentCmd(), newMPSHostCmd(), newNRIPluginCmd(), newBenchCmd(), newSimCmd())
	explainRefusals(root)
	return root
}

// flagError says what a flag takes instead of repeating the parser's error ("strconv.ParseInt:
// parsing "1.5": invalid syntax").
func flagError(_ *cobra.Command, err error) error {
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return err
	}
	f := bad.GetFlag()
	want := map[string]string{
		"int": "a whole number", "int32": "a whole number", "int64": "a whole number",
		"uint": "a whole number, 0 or more", "uint64": "a whole number, 0 or more",
		"float64": "a number such as 2 or 0.5", "duration": "a duration such as 90s, 30m or 4h",
		"bool": "true or false",
	}[f.Value.Type()]
	if want == "" {
		return err
	}
	return fmt.Errorf("--%s %q is not allowed: %s (%s)", f.Name, bad.GetValue(), want, f.Usage)
}
