package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/kube/dashboard"
)

func newDashboardCmd() *cobra.Command {
	var address, mode, secretFile, writes string
	var connect connectFlags
	var auth dashboard.Auth
	cmd := &cobra.Command{
		Use:     "dashboard",
		GroupID: "admin",
		Short:   "Serve the web dashboard for a cluster running Allot",
		Long: `Serve the dashboard: overview, nodes with their GPUs, workloads and queues, updated live.
It reads the cluster with your own identity (your kubeconfig or token) and listens on the
loopback address unless told otherwise.

--auth says who may see what (kube/dashboard/README.md):
  none   everything your identity reads, to whoever reaches the address (the default)
  token  each person signs in with a Kubernetes token (Authorization: Bearer, or the
         sign-in page at /login) and sees what that identity may read: the workloads and
         events of the namespaces where it may list pods
  proxy  an OIDC proxy in front (oauth2-proxy) names the user and groups in headers;
         nothing else may reach the dashboard (a NetworkPolicy, or --proxy-secret-file)
With token or proxy, the identity the dashboard runs as also needs to create tokenreviews
and subjectaccessreviews (the ClusterRole system:auth-delegator).

--writes says whether the console submits, suspends, resumes and deletes workloads, and
as whom: auto (the default) as the person signed in, with their own token (token) or
impersonating them (proxy: the dashboard's identity needs the right to impersonate), and
read-only with --auth none; on also with --auth none, as your own identity; off never.
The API server, RBAC and Allot's webhooks judge each change, and the console shows their
refusal word for word.

--connect-address serves workloads' tools (Jupyter, code-server, TensorBoard) opened from
the console: each on a host name of its own under --connect-url (http://*.localhost:PORT by
default on loopback; a wildcard DNS name and certificate in front of it elsewhere), forwarded
to the pod's port through the API server's port-forward as the person who opened it.`,
		Example: "  allot dashboard\n  allot dashboard --kubeconfig /tmp/allot-up/kubeconfig --address 127.0.0.1:8090 --writes on --connect-address 127.0.0.1:8091\n" +
			"  allot dashboard --auth=proxy --address :8090 --proxy-user-header X-Auth-Request-User --proxy-groups-header X-Auth-Request-Groups",
		Args: cobra.NoArgs,
	}
	c := addConn(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		m, err := dashboard.ParseAuthMode(mode)
		if err != nil {
			return fmt.Errorf("--auth: %w", err)
		}
		auth.Mode = m
		wr, err := dashboard.ParseWrites(writes)
		if err != nil {
			return err
		}
		if secretFile != "" {
			if m != dashboard.AuthProxy {
				return fmt.Errorf("--proxy-secret-file is for --auth=proxy")
			}
			b, err := os.ReadFile(secretFile)
			if err != nil {
				return fmt.Errorf("--proxy-secret-file: %w", err)
			}
			if auth.Secret = strings.TrimSpace(string(b)); auth.Secret == "" {
				return fmt.Errorf("--proxy-secret-file %s is empty", secretFile)
			}
		}
		if err := c.connect(cmd.Context()); err != nil {
			return err
		}
		return serveDashboardWith(cmd.Context(), cmd.OutOrStdout(), c.rc, "--address", address, true, dashboard.Options{Auth: auth, Writes: wr}, connect)
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", "127.0.0.1:8090", "host:port to serve on (keep it on loopback unless something in front checks who asks, or --auth is token or proxy)")
	f.StringVar(&mode, "auth", string(dashboard.AuthNone), "who may see what: none (everything, to whoever reaches it), token (a Kubernetes token per person) or proxy (an OIDC proxy names the user)")
	f.StringVar(&writes, "writes", string(dashboard.WritesAuto), "whether the console changes workloads, as whom: auto (as the person signed in; read-only with --auth none), on (also with --auth none, as your identity) or off")
	f.StringVar(&auth.UserHeader, "proxy-user-header", "X-Forwarded-User", "with --auth=proxy: the header naming the user")
	f.StringVar(&auth.GroupsHeader, "proxy-groups-header", "X-Forwarded-Groups", "with --auth=proxy: the header naming the user's groups, comma-separated")
	f.StringVar(&secretFile, "proxy-secret-file", "", "with --auth=proxy: a file holding a secret the proxy sends on every request; requests without it are refused")
	f.StringVar(&auth.SecretHeader, "proxy-secret-header", "X-Allot-Proxy-Secret", "with --proxy-secret-file: the header that carries the secret")
	f.StringVar(&connect.address, "connect-address", "", "host:port to serve workloads' tools on, opened from the console (empty: none)")
	f.StringVar(&connect.url, "connect-url", "", "the URL the browser reaches --connect-address by, with * for each workload's host name: https://*.apps.example.com (default on loopback: http://*.localhost:PORT)")
	return cmd
}

// serveDashboard listens on address and serves until ctx ends; wait false returns once it
// listens, leaving it to run in the background. It serves everything rc reads (--auth=none)
// and its console submits and changes workloads as rc: allot up's, on one's own machine.
func serveDashboard(ctx context.Context, out io.Writer, rc *rest.Config, flag, address string, wait bool) error {
	return serveDashboardWith(ctx, out, rc, flag, address, wait, dashboard.Options{Writes: dashboard.WritesOn}, connectFlags{address: beside(address), anyPort: true})
}

// connectFlags are where the connect address listens, and the URL the browser reaches it
// by; anyPort takes any free port where that one is taken (allot up, which has no flag for it).
type connectFlags struct {
	address, url string
	anyPort      bool
}

// beside is the connect address allot up serves next to its dashboard's: the same host and
// the next port (any free one where the dashboard's is).
func beside(address string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return ""
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return ""
	}
	if n > 0 {
		n++
	}
	return net.JoinHostPort(host, strconv.Itoa(n))
}

// listen listens on the connect address, and returns the URL pattern the browser
// reaches it by: as given, or http://*.localhost:PORT on a loopback address (browsers and
// curl take every name under localhost to be the loopback address).
func (f connectFlags) listen() (net.Listener, string, error) {
	ln, err := net.Listen("tcp", f.address)
	if err != nil && f.anyPort {
		host, _, _ := net.SplitHostPort(f.address)
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return nil, "", fmt.Errorf("--connect-address %s: %w (pick another host:port)", f.address, err)
	}
	if f.url != "" {
		return ln, f.url, nil
	}
	a := ln.Addr().(*net.TCPAddr)
	host, _, _ := net.SplitHostPort(f.address)
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		ln.Close()
		return nil, "", fmt.Errorf("--connect-url is needed with --connect-address %s: the URL browsers reach it by, with * for each workload's host name (https://*.apps.example.com, a wildcard DNS name and certificate)", f.address)
	}
	return ln, fmt.Sprintf("http://*.localhost:%d", a.Port), nil
}

// serveDashboardWith is serveDashboard with the server's options (its --auth).
func serveDashboardWith(ctx context.Context, out io.Writer, rc *rest.Config, flag, address string, wait bool, opts dashboard.Options, connect connectFlags) error {
	if connect.url != "" && connect.address == "" {
		return fmt.Errorf("--connect-url is for --connect-address: set where it listens too")
	}
	var cl net.Listener
	if connect.address != "" {
		var err error
		if cl, opts.ConnectURL, err = connect.listen(); err != nil {
			return err
		}
	}
	srv, err := dashboard.New(rc, opts)
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		return err
	}
	ln, err := net.Listen("tcp", address)
	if err != nil {
		if cl != nil {
			cl.Close()
		}
		return fmt.Errorf("%s %s: %w (pick another host:port)", flag, address, err)
	}
	if m := opts.Auth.Mode; m != "" && m != dashboard.AuthNone {
		fmt.Fprintf(out, "dashboard: http://%s/ (auth: %s)\n", ln.Addr(), m)
	} else {
		fmt.Fprintf(out, "dashboard: http://%s/\n", ln.Addr())
	}
	if cl != nil {
		fmt.Fprintf(out, "connect: %s (workloads' tools, opened from the dashboard; listening on %s)\n", opts.ConnectURL, cl.Addr())
		go func() {
			if err := srv.ServeConnect(ctx, cl); err != nil {
				fmt.Fprintf(out, "connect stopped: %v\n", err)
			}
		}()
	}
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
