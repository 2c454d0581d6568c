package realnode_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/realnode"
)

// Under the device plugin's DEVICE_ID_STRATEGY=index its CDI spec names GPUs "0", "1", …:
// a fraction's device named by UUID resolves to nothing and containerd refuses the
// container. On a node whose agent says so (allot.dev/cdi-device-ids=index, the pool's
// deviceIDStrategy), the bind names the device by index, and the container gets it.
//
//	real-1 (device plugin: index IDs): nb 0.5 [main: one GPU, by index]
func TestFractionNamedByIndexUnderTheIndexStrategy(t *testing.T) {
	need(t)
	restartRig(t, func(o *realnode.Options) { o.IDStrategy = realnode.StrategyIndex })
	t.Cleanup(func() { restartRig(t, func(*realnode.Options) {}) })
	ctx := context.Background()
	// The agent restarted with --cdi-device-ids index (the pool's deviceIDStrategy) says so
	// on its node; at the end, one with uuid says the plugin's default again. Each runs
	// until the test ends, as the node's agent would.
	strategyAgent := func(ids string) {
		if err := waitNRIRegistered(ctx); err != nil {
			t.Fatal(err)
		}
		o := agentOpts
		o.CDIDeviceIDs = ids
		a, closeConn, err := rig.NewAgent(client, o)
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithCancel(ctx)
		t.Cleanup(func() { cancel(); closeConn() })
		go func() { _ = a.Run(actx) }()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, "real-1", metav1.GetOptions{})
			return err == nil && n.Labels[v1alpha1.LabelCDIDeviceIDs] == ids, nil
		}); err != nil {
			t.Fatalf("the agent with --cdi-device-ids %s did not say so on its node: %v", ids, err)
		}
	}
	strategyAgent(realnode.StrategyIndex)
	t.Cleanup(func() { strategyAgent(realnode.StrategyUUID) })

	queue(t, "team-index", "index", 4)
	p := sharingPod("index", "nb", "team-index", script("main"))
	seen := runAndRead(t, p, "main")
	cur, err := client.CoreV1().Pods("index").Get(ctx, "nb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := cur.Annotations[v1alpha1.AnnotationCDIPrefix+"main"]
	if !regexp.MustCompile(`^k8s\.device-plugin\.nvidia\.com/gpu=[0-9]+$`).MatchString(name) {
		t.Errorf("the bind named %q, want the device plugin's index name", name)
	}
	if gpus := gpuDevices(seen["main"]); len(gpus) != 1 || "nvidia"+name[strings.LastIndex(name, "=")+1:] != gpus[0] {
		t.Errorf("the fraction sees %v for %q, want exactly that GPU", gpus, name)
	}
}
