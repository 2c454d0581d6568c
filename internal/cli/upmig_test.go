package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
)

// allot up --mig 1x1 --mig-dynamic 1x1, with pods made as kubectl would make them: one
// asking the device plugin's 3g runs on the fixed node; one asking the smallest instance
// holding 0.4 of a GPU runs on the other, given the 3g the agent made there.
func TestUpMIGNodes(t *testing.T) {
	if _, err := parseMIGNodes([]string{"1x1:7g.80gb+1g.10gb"}, nil, "A100-SXM4-80GB", 81920); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("a layout past one GPU: %v", err)
	}
	if _, err := parseMIGNodes(nil, []string{"1x1"}, "Tesla-T4", 16384); err == nil || !strings.Contains(err.Error(), "has no MIG") {
		t.Errorf("a GPU without MIG: %v", err)
	}
	if _, err := parseMIGNodes([]string{"2"}, nil, "A100-SXM4-80GB", 81920); err == nil || !strings.Contains(err.Error(), "--mig \"2\" is not allowed: NODESxGPUS") {
		t.Errorf("a size without GPUs: %v", err)
	}
	up := startUp(t, "--nodes", "1", "--mig", "1x1", "--mig-dynamic", "1x1")
	ctx, kc := up.ctx, up.kubeconfig
	for _, want := range []string{"(mig-1 …) × 1 GPUs in MIG mode, each laid out 3g.40gb + 2g.20gb + 1g.10gb", "(migdyn-1 …) × 1 GPUs in MIG mode that Allot lays out"} {
		if !strings.Contains(up.out.String(), want) {
			t.Errorf("allot up does not say %q:\n%s", want, up.out.String())
		}
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 2}}}
	if _, err := allotclient.NewForConfigOrDie(rc).AllotV1alpha1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(rc)
	pod := func(name string, ann map[string]string, res corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team"}, Annotations: ann},
			Spec: corev1.PodSpec{SchedulerName: "allot", Containers: []corev1.Container{{Name: "main", Image: "cuda",
				Resources: corev1.ResourceRequirements{Limits: res}}}}}
	}
	for _, p := range []*corev1.Pod{
		pod("fixed", nil, corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}),
		pod("made", map[string]string{v1alpha1.AnnotationMIG: v1alpha1.MIGSmallest, v1alpha1.AnnotationGPUFraction: "0.4"}, nil),
	} {
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
	}
	where := map[string]string{}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, name := range []string{"fixed", "made"} {
			p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
			where[name] = p.Spec.NodeName + " " + p.Annotations[v1alpha1.AnnotationMIGInstances]
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the MIG pods did not both run: %v", where)
	}
	if !strings.HasPrefix(where["fixed"], "mig-1 ") || !strings.HasSuffix(where["fixed"], "/3g.40gb@0") ||
		!strings.HasPrefix(where["made"], "migdyn-1 ") || !strings.Contains(where["made"], "/3g.40gb@") {
		t.Errorf("fixed at %q (want mig-1's 3g at 0), made at %q (want a 3g on migdyn-1: the smallest holding 0.4)", where["fixed"], where["made"])
	}
}
