package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/control"
)

// conn holds kubectl's connection flags (--kubeconfig, --context, -n, …) for the commands
// that talk to a cluster running Allot.
type conn struct {
	flags  *kubeFlags
	client kubernetes.Interface
	allot  versioned.Interface // Allot's own resources: Queues, PodGroups, Topologies
	dyn    dynamic.Interface   // workloads' kinds, which other projects define
	rc     *rest.Config
	ns     string
}

// kubeFlags are kubectl's connection flags, from client-go's clientcmd. (cli-runtime's
// ConfigFlags would bring kustomize, whose plugin loader links Go's plugin package, which
// makes the binary bind every C symbol at start: NVIDIA's NVML bindings resolve theirs
// only once the driver's library is loaded, so the binary would not start.)
type kubeFlags struct {
	KubeConfig *string
	Namespace  *string
	overrides  clientcmd.ConfigOverrides
}

func (k *kubeFlags) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *k.KubeConfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
}

func (k *kubeFlags) ToRESTConfig() (*rest.Config, error) {
	return k.ToRawKubeConfigLoader().ClientConfig()
}

func (k *kubeFlags) ToRESTMapper() (meta.RESTMapper, error) {
	rc, err := k.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery())), nil
}

func addConn(cmd *cobra.Command) *conn {
	k := &kubeFlags{KubeConfig: new(string)}
	cmd.Flags().StringVar(k.KubeConfig, "kubeconfig", "", "Path to the kubeconfig file to use for CLI requests.")
	clientcmd.BindOverrideFlags(&k.overrides, cmd.Flags(), clientcmd.RecommendedConfigOverrideFlags(""))
	k.Namespace = &k.overrides.Context.Namespace
	return &conn{flags: k}
}

// control connects and returns what acts on workloads.
func (c *conn) control(ctx context.Context) (control.Clients, error) {
	if err := c.connect(ctx); err != nil {
		return control.Clients{}, err
	}
	m, err := c.flags.ToRESTMapper()
	if err != nil {
		return control.Clients{}, err
	}
	return control.Clients{Client: c.client, Allot: c.allot, Dyn: c.dyn, Mapper: m}, nil
}

// connect builds clients and checks the cluster answers, saying which kubeconfig and
// server it tried when it does not.
func (c *conn) connect(ctx context.Context) error {
	rc, err := c.flags.ToRESTConfig()
	if err != nil {
		path := c.kubeconfigPath()
		// client-go's own words name KUBERNETES_MASTER, a variable nothing reads any more.
		if !anyExists(filepath.SplitList(path)) {
			return fmt.Errorf("no cluster configured: no kubeconfig at %s; allot up starts a cluster and prints the kubeconfig it writes, or pass --kubeconfig", path)
		}
		if clientcmd.IsEmptyConfig(err) {
			return fmt.Errorf("no cluster configured: the kubeconfig %s names no cluster (no current context); pass --kubeconfig or --context", path)
		}
		return fmt.Errorf("no cluster configured: %w (tried kubeconfig %s; allot up writes one, or pass --kubeconfig)", err, path)
	}
	rc.QPS, rc.Burst = 50, 100
	c.rc = rest.CopyConfig(rc)
	rc.Timeout = 15 * time.Second
	if c.client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	if c.allot, err = allotclient.NewForConfig(rc); err != nil {
		return err
	}
	if c.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return err
	}
	if _, err := c.client.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("no cluster reachable at %s (kubeconfig %s): %v", rc.Host, c.kubeconfigPath(), err)
	}
	ns, _, err := c.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	c.ns = ns
	return nil
}

func (c *conn) kubeconfigPath() string {
	if c.flags.KubeConfig != nil && *c.flags.KubeConfig != "" {
		return *c.flags.KubeConfig
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		return env
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".kube", "config")
}

// outputFormat checks -o.
func outputFormat(o string, wide bool) error {
	allowed := []string{"table", "json", "yaml"}
	if wide {
		allowed = append(allowed, "wide")
	}
	for _, a := range allowed {
		if o == a {
			return nil
		}
	}
	return fmt.Errorf("-o %q is not allowed: %s", o, strings.Join(allowed, ", "))
}

// show is the shape of the read-only commands: check -o, connect, read, then print the
// data as JSON or YAML, or as the command's table.
func show[T any](cmd *cobra.Command, c *conn, output string, read func(context.Context) (T, error), table func(io.Writer, T) error) error {
	if err := outputFormat(output, false); err != nil {
		return err
	}
	if err := c.connect(cmd.Context()); err != nil {
		return err
	}
	v, err := read(cmd.Context())
	if err != nil {
		return err
	}
	if output != "table" {
		return printData(cmd.OutOrStdout(), output, v)
	}
	return table(cmd.OutOrStdout(), v)
}

// printData writes v as JSON or YAML.
func printData(w io.Writer, format string, v any) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// config is the CLI's own settings, in the user's config directory.
type config struct {
	Queue string `json:"queue,omitempty"`
}

func configPath() string {
	if p := os.Getenv("ALLOT_CONFIG"); p != "" {
		return p
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "allot", "config.yaml")
}

func loadConfig() config {
	var c config
	if b, err := os.ReadFile(configPath()); err == nil {
		_ = yaml.Unmarshal(b, &c)
	}
	return c
}

func saveConfig(c config) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(configPath()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(configPath(), b, 0o644)
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// gpuAmount prints 2, 0.5 or 1.25.
func gpuAmount(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// bar draws used/total in width cells, with the part over mark (a quota) drawn apart.
func bar(used, mark, total float64, width int) string {
	if total <= 0 {
		return ""
	}
	cells := func(v float64) int { return min(width, int(v/total*float64(width)+0.5)) }
	in, over := cells(min(used, mark)), cells(used)-cells(min(used, mark))
	return "[" + strings.Repeat("█", in) + strings.Repeat("▒", over) + strings.Repeat("·", max(0, width-in-over)) + "]"
}

// anyExists tells whether any of the files exists (KUBECONFIG may list several).
func anyExists(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
