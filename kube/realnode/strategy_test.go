package realnode_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	restartRig(t, realnode.StrategyIndex)
	t.Cleanup(func() { restartRig(t, realnode.StrategyUUID) })
	ctx := context.Background()
	// What the agent writes from --cdi-device-ids index (the pool's deviceIDStrategy).
	label := func(v string) {
		patch := `{"metadata":{"labels":{"` + v1alpha1.LabelCDIDeviceIDs + `":` + v + `}}}`
		if _, err := client.CoreV1().Nodes().Patch(ctx, "real-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(`"index"`)
	t.Cleanup(func() { label("null") })
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
