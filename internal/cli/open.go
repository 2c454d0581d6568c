package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"

	"github.com/allot-dev/allot/kube/connect"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/submit"
)

// forwardFlags are what open and port-forward share.
type forwardFlags struct {
	pod     string
	address string
	wait    time.Duration
}

func newPortForwardCmd() *cobra.Command {
	var c *conn
	var f forwardFlags
	cmd := &cobra.Command{
		Use:     "port-forward NAME [LOCAL:]REMOTE",
		GroupID: "work",
		Short:   "Forward a local port to a port of a workload's running pod, through the API server",
		Long: `Forward a local port to a port of a workload's running pod, as kubectl port-forward does:
through the API server and the node's kubelet, so nothing of the pod needs to be exposed.
REMOTE is the pod's port; LOCAL, when given, the local one (0 or left out: the same port
if it is free, else any free one). Ctrl-C stops it.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remote, err := parsePortPair(args[1])
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			p, err := c.runningPod(ctx, cmd.ErrOrStderr(), args[0], f, false)
			if err != nil {
				return err
			}
			return c.forward(ctx, cmd, p, local, remote, f.address, func(addr string) {
				fmt.Fprintf(cmd.OutOrStdout(), "Forwarding from %s -> pod %s port %d (Ctrl-C stops it)\n", addr, p.Name, remote)
			})
		},
	}
	f.bind(cmd, 0)
	c = addConn(cmd)
	return cmd
}

func newOpenCmd() *cobra.Command {
	var c *conn
	var f forwardFlags
	var noBrowser bool
	var local int
	cmd := &cobra.Command{
		Use:     "open NAME",
		GroupID: "work",
		Short:   "Open an interactive workload in the browser (resuming it if it is suspended)",
		Long: `Open an interactive workload (a notebook, an IDE) from this machine: forward a local port to
the port it was submitted with (--port; else its container's first port) through the API
server, print the URL — with the notebook's token when its log shows one (Jupyter's
?token= line) — and open it in the browser when there is one. A suspended workload is
resumed first, and the command waits for its pod. Ctrl-C stops the forwarding; the
workload keeps running.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if local < 0 || local > 65535 {
				return fmt.Errorf("--local-port %d is not allowed: 1 to 65535, or 0 for the pod's port if it is free, else any", local)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			p, err := c.runningPod(ctx, cmd.ErrOrStderr(), args[0], f, true)
			if err != nil {
				return err
			}
			remote, err := connect.Port(args[0], p)
			if err != nil {
				return err
			}
			path, token := connect.NotebookToken(ctx, c.client, p)
			return c.forward(ctx, cmd, p, local, remote, f.address, func(addr string) {
				url := "http://" + addr + path
				if token != "" {
					url += "?token=" + token
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s is open at %s\n(forwarding to pod %s port %d through the API server; Ctrl-C stops it, the workload keeps running)\n",
					args[0], url, p.Name, remote)
				if !noBrowser {
					openBrowser(url)
				}
			})
		},
	}
	f.bind(cmd, 5*time.Minute)
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the URL without opening a browser")
	cmd.Flags().IntVar(&local, "local-port", 0, "the local port (0: the workload's own if it is free, else any)")
	c = addConn(cmd)
	return cmd
}

func (f *forwardFlags) bind(cmd *cobra.Command, wait time.Duration) {
	cmd.Flags().StringVar(&f.pod, "pod", "", "which pod: its name or index (default: the first running)")
	cmd.Flags().StringVar(&f.address, "address", "127.0.0.1", "the local address to listen on")
	cmd.Flags().DurationVar(&f.wait, "wait", wait, "how long to wait for a pod that is not running yet (0: not at all)")
}

// parsePortPair reads [LOCAL:]REMOTE.
func parsePortPair(s string) (local, remote int, err error) {
	l, r, pair := strings.Cut(s, ":")
	if !pair {
		l, r = "0", s
	}
	bad := fmt.Errorf("port %q is not allowed: [LOCAL:]REMOTE, REMOTE a port from 1 to 65535, LOCAL one from 0 to 65535 (0 or left out: REMOTE if it is free, else any)", s)
	if remote, err = strconv.Atoi(r); err != nil || remote < 1 || remote > 65535 {
		return 0, 0, bad
	}
	if local, err = strconv.Atoi(l); err != nil || local < 0 || local > 65535 {
		return 0, 0, bad
	}
	return local, remote, nil
}

// runningPod finds a workload's running pod. A suspended workload is resumed first when
// resume is set, else refused; a workload whose pod is not running yet is waited for up to
// f.wait, saying on w what it waits for.
func (c *conn) runningPod(ctx context.Context, w io.Writer, name string, f forwardFlags, resume bool) (*corev1.Pod, error) {
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	wl, err := inspect.Find(ctx, c.client, c.ns, name)
	if err != nil {
		return nil, err
	}
	switch wl.Status {
	case "Succeeded", "Failed":
		return nil, fmt.Errorf("%s has finished (%s): nothing of it runs to connect to", name, strings.ToLower(wl.Status))
	case "Suspended":
		if !resume {
			return nil, fmt.Errorf("%s is suspended: allot resume %s starts it again (allot open %s resumes it itself)", name, name, name)
		}
		// A workspace or a service is opened by resuming it; a training job suspended by
		// someone (an admin, Kueue) is not started behind their back by a look at it.
		if wl.Type != submit.TypeInteractive && wl.Type != submit.TypeInference {
			return nil, fmt.Errorf("%s is a suspended %s workload: allot open resumes only interactive and inference ones; allot resume %s starts it again", name, wl.Type, name)
		}
		ctl, err := c.control(ctx)
		if err != nil {
			return nil, err
		}
		msg, err := ctl.Suspend(ctx, wl, true)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "%s was suspended: %s; waiting for its pod …\n", name, msg)
		if f.wait == 0 {
			f.wait = 5 * time.Minute
		}
	}
	if resume && wl.Kind == "Deployment" && len(wl.Pods) == 0 {
		woke, err := c.wake(ctx, wl)
		if err != nil {
			return nil, err
		}
		if woke {
			fmt.Fprintf(w, "%s was at rest at zero replicas: scaled to 1 (its autoscaler takes it from there); waiting for its pod …\n", name)
			f.wait = max(f.wait, 5*time.Minute)
		}
	}
	deadline := time.Now().Add(f.wait)
	said := ""
	for {
		if p := connect.PickRunning(wl, f.pod); p != "" {
			pod, err := c.client.CoreV1().Pods(wl.Namespace).Get(ctx, p, metav1.GetOptions{})
			if err == nil && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
				return pod, nil
			}
		}
		state := connect.PodStates(wl)
		if f.wait == 0 || !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%s is not running: %s (allot describe %s says why)", name, state, name)
		}
		if state != said {
			fmt.Fprintf(w, "waiting for %s: %s\n", name, state)
			said = state
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		if wl, err = inspect.Find(ctx, c.client, c.ns, name); err != nil {
			return nil, err
		}
	}
}

// wake scales a Deployment at rest at zero replicas (an autoscaler with a minimum of 0 put
// it there, and cannot take it from zero by itself) to one, through its scale subresource
// as the autoscaler does; false when it was not at zero.
func (c *conn) wake(ctx context.Context, wl *inspect.Workload) (bool, error) {
	deployments := c.client.AppsV1().Deployments(wl.Namespace)
	sc, err := deployments.GetScale(ctx, wl.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("waking %s: %w", wl.Name, err)
	}
	if sc.Spec.Replicas != 0 || (wl.UID != "" && sc.UID != wl.UID) {
		return false, nil
	}
	ctl, err := c.control(ctx)
	if err != nil {
		return false, err
	}
	if !ctl.AtRest(ctx, wl.Namespace, "Deployment", wl.Name) {
		return false, fmt.Errorf("%s is scaled to zero replicas, and no autoscaler with a minimum of 0 put it there: it is its owner's to scale again (kubectl scale deployment %s --replicas=1)", wl.Name, wl.Name)
	}
	sc.Spec.Replicas = 1
	if _, err := deployments.UpdateScale(ctx, wl.Name, sc, metav1.UpdateOptions{}); err != nil {
		return false, fmt.Errorf("waking %s (scaling it to 1): %w", wl.Name, err)
	}
	return true, nil
}

// forward port-forwards local to remote of pod p through the API server, with client-go's
// port-forward client (websocket, falling back to SPDY, as kubectl does), calls ready with
// the local address once it listens, and returns when ctx ends or the connection is lost.
func (c *conn) forward(ctx context.Context, cmd *cobra.Command, p *corev1.Pod, local, remote int, address string, ready func(addr string)) error {
	rc, err := c.flags.ToRESTConfig()
	if err != nil {
		return err
	}
	if local == 0 && free(address, remote) {
		local = remote
	}
	fallback, err := connect.Dialer(rc, c.client, p.Namespace, p.Name)
	if err != nil {
		return err
	}
	stop, readyCh := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(fallback, []string{address}, []string{fmt.Sprintf("%d:%d", local, remote)}, stop, readyCh, io.Discard, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case err := <-done:
		return fmt.Errorf("port-forward to pod %s port %d: %w", p.Name, remote, err)
	case <-ctx.Done():
		close(stop)
		<-done
		return nil
	case <-readyCh:
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		close(stop)
		<-done
		return fmt.Errorf("port-forward to pod %s port %d: no local port: %v", p.Name, remote, err)
	}
	ready(net.JoinHostPort(address, strconv.Itoa(int(ports[0].Local))))
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("port-forward to pod %s: %w", p.Name, err)
		}
		return fmt.Errorf("port-forward to pod %s ended: the pod or its node went away", p.Name)
	case <-ctx.Done():
		close(stop)
		<-done
		return nil
	}
}

// free reports whether port can be listened on at address.
func free(address string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// openBrowser opens url in the desktop's browser where there is one; where there is none
// (a server, a container) it does nothing: the URL is printed anyway.
func openBrowser(url string) {
	name, args := "xdg-open", []string{url}
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", url}
	default:
		if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
			return
		}
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return
	}
	cmd := exec.Command(path, args...)
	if cmd.Start() == nil {
		go func() { _ = cmd.Wait() }()
	}
}
