package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/ecosystem"
	"github.com/allot-dev/allot/kube/simnode"
)

// What allot up adds to its simulated cluster beyond nodes: the fair-share history and a
// topology, so that its demo can show both, the real controllers of other projects
// (--with), and what to try once it is up.

// parseHistory reads --fair-share-history STRENGTH[:HALF-LIFE].
func parseHistory(v string) (float64, time.Duration, error) {
	s, h, hasHalfLife := strings.Cut(v, ":")
	strength, err := strconv.ParseFloat(s, 64)
	if err == nil {
		err = engine.CheckUsageStrength(strength)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("--fair-share-history %q is not allowed: STRENGTH[:HALF-LIFE], such as 1 or 0.5:72h, with STRENGTH from 0 (history ignored) to 1 (strong)", v)
	}
	halfLife := engine.DefaultUsageHalfLife
	if hasHalfLife {
		if halfLife, err = time.ParseDuration(h); err != nil || halfLife <= 0 {
			return 0, 0, fmt.Errorf("--fair-share-history %q is not allowed: the half-life after the colon is a positive duration such as 24h or 168h", v)
		}
	}
	return strength, halfLife, nil
}

// topologyLevel is a level's name as a label's name part, and no more.
var topologyLevel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// parseTopologyLevels reads --topology: level names, narrowest first.
func parseTopologyLevels(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	levels := strings.Split(v, ",")
	seen := map[string]bool{}
	for _, l := range levels {
		if !topologyLevel.MatchString(l) || len(l) > 40 || seen[l] {
			return nil, fmt.Errorf("--topology %q is not allowed: distinct level names, narrowest first, comma-separated, each of lowercase letters, digits and '-', such as rack,block", v)
		}
		seen[l] = true
	}
	return levels, nil
}

// createTopology labels the simulated nodes with their domain at each level (2 nodes to a
// domain of the narrowest level, 2 domains of one level to a domain of the next) and
// creates the Topology named default that lists the levels, widest first.
func createTopology(ctx context.Context, client kubernetes.Interface, allot versioned.Interface, spec simnode.Spec, levels []string) error {
	label := func(level string) string { return "topology.allot.dev/" + level }
	for i := 0; i < spec.Count; i++ {
		labels := map[string]string{}
		group := i
		for _, l := range levels {
			group /= 2
			labels[label(l)] = fmt.Sprintf("%s-%d", l, group+1)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s-%d", spec.Prefix, i+1)
		if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("labelling %s: %w", name, err)
		}
	}
	t := &v1alpha1.Topology{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	for i := len(levels) - 1; i >= 0; i-- {
		t.Spec.Levels = append(t.Spec.Levels, v1alpha1.TopologyLevel{Name: levels[i], NodeLabel: label(levels[i])})
	}
	topologies := allot.AllotV1alpha1().Topologies()
	if old, err := topologies.Get(ctx, t.Name, metav1.GetOptions{}); err == nil {
		old.Spec = t.Spec // a restart with other levels: the flag wins
		_, err = topologies.Update(ctx, old, metav1.UpdateOptions{})
		return err
	}
	_, err := topologies.Create(ctx, t, metav1.CreateOptions{})
	return err
}

// startControllers runs the controllers --with names (already checked), once the cluster
// and the scheduler are up, so that what they make is scheduled from the start and meets
// the admission webhook. The workload controller, started before their CRDs, watches
// their kinds once they are served (kube/workload rediscovers them).
func startControllers(ctx context.Context, out io.Writer, cfg *rest.Config, names []string) error {
	if len(names) == 0 {
		return nil
	}
	fmt.Fprintf(out, "starting the controllers of %s …\n", strings.Join(names, ", "))
	if err := ecosystem.Start(ctx, cfg, names); err != nil {
		return fmt.Errorf("--with: %w", err)
	}
	return nil
}

// demoNext is what allot up --demo prints once it is ready: three things to try.
func demoNext(kubeconfig string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nTry next (in another terminal):\n")
	fmt.Fprintf(&b, "  allot queues --kubeconfig %s\n      team-a borrows 6 GPUs beyond its quota of 4 while team-d's quota of 8 is unused\n", kubeconfig)
	fmt.Fprintf(&b, "  allot submit llama -p team-d -i busybox -g 4 --workers 2 --kubeconfig %s\n      team-d takes its quota back: a gang of 2 × 4 GPUs, 4 of them free and 4 reclaimed from team-a\n", kubeconfig)
	fmt.Fprintf(&b, "  allot describe llama --kubeconfig %s\n      where it runs, and which pods of team-a moved or stopped for it, and why\n", kubeconfig)
	fmt.Fprintf(&b, "and watch it on the dashboard (its address is above).\n")
	return b.String()
}
