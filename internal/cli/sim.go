package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/sim"
)

func newSimCmd() *cobra.Command {
	var file, output string
	cmd := &cobra.Command{
		Use:     "sim --scenario FILE [-o table|json]",
		GroupID: "study",
		Short:   "Replay a scenario through the scheduling engine with a simulated clock",
		Long: `Replay a scenario file through the same engine the scheduler runs.

After every step the simulator runs scheduling cycles until the plan is empty and reports
the queues (quota, fair share, allocated) and the jobs (status, placement, reason).
Expectations written in the file are checked; a mismatch exits non-zero.`,
		Example: "  allot sim --scenario examples/reclaim.yaml\n  allot sim --scenario examples/fractions.yaml -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("--scenario is required: the path of a scenario file (see examples/)")
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q is not supported: allowed values are table, json", output)
			}
			sc, err := sim.LoadFile(file)
			if err != nil {
				return err
			}
			reports, runErr := sim.Run(sc)
			out := cmd.OutOrStdout()
			if output == "json" {
				if err := sim.WriteJSON(out, reports); err != nil {
					return err
				}
			} else if err := sim.WriteTable(out, reports); err != nil {
				return err
			}
			return runErr
		},
	}
	cmd.Flags().StringVarP(&file, "scenario", "f", "", "scenario file (YAML)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	_ = cmd.MarkFlagFilename("scenario", "yaml", "yml")
	cmd.AddCommand(newTraceCmd(), newVariantCmd(), newWorkloadCmd())
	return cmd
}
