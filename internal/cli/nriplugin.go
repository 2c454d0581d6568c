package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/nriplugin"
)

func newNRIPluginCmd() *cobra.Command {
	var o nriplugin.Options
	var probeOnly bool
	cmd := &cobra.Command{
		Use:     "nri-plugin",
		GroupID: "run",
		Short:   "Give sharing pods their GPU by CDI as containerd creates them (a container of the agent's pod on cdi pools)",
		Long: `Serve containerd's NRI socket as the plugin "allot": when a container is created, inject the
CDI devices the scheduler named for it in its pod's annotation cdi.allot.dev/<container>
(containerd resolves them against the node's CDI specs). Devices of management.nvidia.com/gpu
(every GPU of the node) are given only to pods of --namespace (Allot's agent). With
--sharing-root, a sharing container's /etc/ld.so.preload is a list of its own: the node's
(HAMi-core's library on a hami-core node), then its image's own, which a hook run by the
runtime appends once the container's root filesystem is mounted.

--probe exits 0 once the plugin is registered (its --ready-file exists) or where the node's
runtime has no NRI socket (nothing to wait for), else 1: the chart's startup probe, so that
the agent's container is created only once the plugin can give it its devices.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if probeOnly {
				if _, err := os.Stat(o.Socket); errors.Is(err, os.ErrNotExist) {
					return nil
				}
				if _, err := os.Stat(o.ReadyFile); err != nil {
					return fmt.Errorf("not registered with the container runtime yet (%s): %w", o.ReadyFile, err)
				}
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			slog.Info("allot nri-plugin: serving", "socket", o.Socket, "namespace", o.Namespace)
			return nriplugin.Run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Socket, "socket", "/var/run/nri/nri.sock", "containerd's NRI socket")
	f.StringVar(&o.Namespace, "namespace", v1alpha1.SystemNamespace, "Allot's namespace: only its pods may be given management devices")
	f.StringVar(&o.ReadyFile, "ready-file", "/run/allot-nri/ready", "written once registered with the container runtime (the agent and the startup probe read it)")
	f.StringVar(&o.SharingRoot, "sharing-root", "", "the agent's --sharing-root (the same path on the host): each sharing container is given a preload list of its own there, its image's own /etc/ld.so.preload appended to the node's (empty: the node's list replaces the image's)")
	f.BoolVar(&probeOnly, "probe", false, "exit 0 once registered (or where there is no NRI socket), else 1")
	return cmd
}
