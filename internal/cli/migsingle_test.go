package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
)

// allot up --mig-single makes nodes of the device plugin's single MIG strategy (each GPU
// as many instances of one profile as it holds, 1g.10gb by default on an A100-80GB), and
// allot submit --mig asks their instances as that strategy gives them: nvidia.com/gpu
// pinned to the nodes' product. With a mixed node (3g.40gb + 2g.20gb + 1g.10gb) beside a
// single node of 1g.10gb and one of 4g.40gb:
//
//   - --mig 4g.40gb, only on a single node: asked as the single strategy's, and said so;
//   - --mig 1g.10gb, on both kinds: the mixed strategy's, and said how to ask the other;
//   - --mig 1g.10gb --mig-strategy single --gpu-count 2: two of the single node's 1g;
//   - allot list counts each as its instances' part of a GPU (4/7, 1/7, 2/7), held and
//     requested, not 1 GPU nor 0.
//
// What cannot be asked is refused naming the flag, before anything is made.
func TestUpAndSubmitMIGSingle(t *testing.T) {
	specs, err := parseSingleMIGNodes([]string{"1x2", "2x1:3g.40gb"}, "A100-SXM4-80GB", 81920)
	if err != nil || len(specs) != 2 || specs[0].Prefix != "migsingle" || strings.Join(specs[0].MIGLayout, "+") != strings.Repeat("1g.10gb+", 6)+"1g.10gb" ||
		specs[1].Prefix != "migsingle2" || strings.Join(specs[1].MIGLayout, "+") != "3g.40gb+3g.40gb" || specs[1].MIGStrategy != "single" {
		t.Errorf("--mig-single 1x2 --mig-single 2x1:3g.40gb: %+v, %v", specs, err)
	}
	for v, want := range map[string]string{
		"2":            `--mig-single "2" is not allowed: NODESxGPUS[:PROFILE] such as 1x2 or 1x2:2g.20gb`,
		"1x1:":         `--mig-single "1x1:" is not allowed: NODESxGPUS[:PROFILE]`,
		"1x1:3g.20gb":  `--mig-single 1x1:3g.20gb: MIG profile "3g.20gb" is not one of A100-80GB's: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb`,
		"1x1:1g.10gb+": `is not one of A100-80GB's`,
	} {
		if _, err := parseSingleMIGNodes([]string{v}, "A100-SXM4-80GB", 81920); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--mig-single %s: %v, want %q", v, err, want)
		}
	}
	if _, err := parseSingleMIGNodes([]string{"1x1"}, "Tesla-T4", 16384); err == nil || !strings.Contains(err.Error(), `--mig-single 1x1: GPU type "Tesla-T4" has no MIG`) {
		t.Errorf("a GPU without MIG: %v", err)
	}

	up := startUp(t, "--nodes", "1", "--mig", "1x1", "--mig-single", "1x1", "--mig-single", "1x1:4g.40gb")
	ctx, kc := up.ctx, up.kubeconfig
	for _, want := range []string{
		"(migsingle-1 …) × 1 GPUs in MIG mode, each 7 × 1g.10gb given as nvidia.com/gpu (the device plugin's single strategy): allot submit NAME -p QUEUE -i IMAGE --mig 1g.10gb --mig-strategy single\n",
		"(migsingle2-1 …) × 1 GPUs in MIG mode, each 1 × 4g.40gb given as nvidia.com/gpu (the device plugin's single strategy): allot submit NAME -p QUEUE -i IMAGE --mig 4g.40gb\n",
	} {
		if !strings.Contains(up.out.String(), want) {
			t.Errorf("allot up does not say %q:\n%s", want, up.out.String())
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "ml"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 4}}}
	if _, err := allotclient.NewForConfigOrDie(rc).AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mig", "1g.10gb", "--mig-strategy", "both"}, `--mig-strategy "both" is not allowed: mixed (the device plugin's nvidia.com/mig-PROFILE) or single (nvidia.com/gpu pinned to the nodes' nvidia.com/gpu.product <model>-MIG-PROFILE)`},
		{[]string{"--mig-dynamic", "1g.10gb", "--mig-strategy", "single"}, "--mig-strategy single needs --mig PROFILE"},
		{[]string{"--mig", "2g.20gb", "--mig-strategy", "single"}, "--mig 2g.20gb --mig-strategy single: no node of the cluster's nodes gives 2g.20gb instances as the device plugin's single strategy (nvidia.com/gpu, nvidia.com/gpu.product <model>-MIG-2g.20gb); mig-1 has them as the mixed strategy's nvidia.com/mig-2g.20gb: ask with --mig-strategy mixed"},
		{[]string{"--mig", "1g.10gb", "--mig-strategy", "single", "--gpu-count", "8"}, "--mig 1g.10gb --mig-strategy single --gpu-count 8: no node can hold it: the most 1g.10gb instances on one node of the cluster's nodes is 7 (migsingle-1)"},
		{[]string{"--mig", "1g.10gb", "--mig-strategy", "single", "--dry-run"}, "--mig-strategy single: no nvidia.com/gpu.product to pin: the nodes' <model>-MIG-1g.10gb (read from the cluster's nodes; with --dry-run give the model with --gpu-type)"},
	} {
		out, err := runAllot(ctx, kc, append([]string{"submit", "refused", "-p", "ml", "-i", "pytorch"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("allot submit %v: %v\nwant %q\n%s", c.args, err, c.want, out)
		}
	}
	yaml, err := runAllot(ctx, kc, "submit", "plan", "-p", "ml", "-i", "pytorch", "--mig", "1g.10gb", "--mig-strategy", "single", "--gpu-type", "A100-SXM4-80GB", "--dry-run")
	if err != nil || !strings.Contains(yaml, "nvidia.com/gpu.product: A100-SXM4-80GB-MIG-1g.10gb") || !strings.Contains(yaml, `nvidia.com/gpu: "1"`) {
		t.Errorf("--dry-run of the single strategy (%v):\n%s", err, yaml)
	}

	for _, c := range []struct {
		name string
		args []string
		note string
	}{
		{"auto", []string{"--mig", "4g.40gb"}, "--mig 4g.40gb: 4g.40gb instances are on migsingle2-1, given as nvidia.com/gpu by the device plugin's single MIG strategy: asked as nvidia.com/gpu pinned to nvidia.com/gpu.product A100-SXM4-80GB-MIG-4g.40gb\n"},
		{"mixed", []string{"--mig", "1g.10gb"}, "--mig 1g.10gb: 1g.10gb instances asked as the device plugin's mixed strategy gives them, nvidia.com/mig-1g.10gb (on mig-1); the single strategy's nodes migsingle-1 have them too, as nvidia.com/gpu: --mig-strategy single asks those instead\n"},
		{"pinned", []string{"--mig", "1g.10gb", "--mig-strategy", "single", "--gpu-count", "2"}, ""},
	} {
		out, err := runAllot(ctx, kc, append([]string{"submit", c.name, "-p", "ml", "-i", "pytorch"}, c.args...)...)
		if err != nil || !strings.Contains(out, c.note) {
			t.Fatalf("allot submit %s %v: %v\nwant %q\n%s", c.name, c.args, err, c.note, out)
		}
	}
	client := kubernetes.NewForConfigOrDie(rc)
	for name, node := range map[string]string{"auto": "migsingle2-1", "mixed": "mig-1", "pinned": "migsingle-1"} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "allot.dev/workload=" + name})
			return err == nil && len(pods.Items) == 1 && pods.Items[0].Spec.NodeName == node && string(pods.Items[0].Status.Phase) == "Running", nil
		})
		if err != nil {
			list, _ := runAllot(ctx, kc, "list", "-o", "wide")
			t.Fatalf("%s did not run on %s:\n%s", name, node, list)
		}
	}
	list, err := runAllot(ctx, kc, "list")
	if err != nil {
		t.Fatal(err)
	}
	for name, gpus := range map[string]string{"auto": "0.571/0.571", "mixed": "0.142/0.142", "pinned": "0.284/0.284"} {
		if !regexp.MustCompile(`(?m)^` + name + `\s+Job\s+ml\s+train\s+Running\s+` + regexp.QuoteMeta(gpus) + `\s`).MatchString(list) {
			t.Errorf("allot list does not show %s holding and asking %s GPUs:\n%s", name, gpus, list)
		}
	}
}
