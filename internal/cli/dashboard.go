package cli

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/kube/dashboard"
)

func newDashboardCmd() *cobra.Command {
	var address string
	cmd := &cobra.Command{
		Use:     "dashboard",
		GroupID: "admin",
		Short:   "Serve the web dashboard for a cluster running Allot",
		Long: `Serve the dashboard: overview, nodes with their GPUs, workloads and queues, updated live.
It reads the cluster with your own identity (your kubeconfig or token), only reads, and
listens on the loopback address unless told otherwise.`,
		Example: "  allot dashboard\n  allot dashboard --kubeconfig /tmp/allot-up/kubeconfig --address 127.0.0.1:8090",
		Args:    cobra.NoArgs,
	}
	c := addConn(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := c.connect(cmd.Context()); err != nil {
			return err
		}
		return serveDashboard(cmd.Context(), cmd.OutOrStdout(), c.rc, "--address", address, true)
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1:8090", "host:port to serve on (keep it on loopback unless something in front checks who asks)")
	return cmd
}

// serveDashboard listens on address and serves until ctx ends; wait false returns once it
// listens, leaving it to run in the background.
func serveDashboard(ctx context.Context, out io.Writer, rc *rest.Config, flag, address string, wait bool) error {
	srv, err := dashboard.New(rc, dashboard.Options{})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("%s %s: %w (pick another host:port)", flag, address, err)
	}
	fmt.Fprintf(out, "dashboard: http://%s/\n", ln.Addr())
	if !wait {
		go func() {
			if err := srv.Serve(ctx, ln); err != nil {
				fmt.Fprintf(out, "dashboard stopped: %v\n", err)
			}
		}()
		return nil
	}
	return srv.Serve(ctx, ln)
}
