package simnode

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/localcluster"
)

// TestSimulatedNodesAndKubelet: nodes carry GFD labels and GPU capacity and hold a Lease;
// a bound pod runs, and one with a sim-duration succeeds.
func TestSimulatedNodesAndKubelet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, err := localcluster.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Clients stop before the API server, which otherwise waits for their watches.
	defer func() { cancel(); c.Stop() }()
	client := kubernetes.NewForConfigOrDie(c.Config)
	if err := Create(ctx, client, Spec{Prefix: "gpu", Count: 2, GPUs: 4, GPUType: "H100", GPUMemoryMi: 81920, CPU: "32", Memory: "256Gi"}); err != nil {
		t.Fatal(err)
	}
	go NewKubelet(client).Run(ctx)
	n, err := client.CoreV1().Nodes().Get(ctx, "gpu-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpus := n.Status.Allocatable[GPUResource]
	if n.Labels[LabelProduct] != "H100" || n.Labels[LabelCount] != "4" || n.Labels[LabelMemory] != "81920" || gpus.Value() != 4 {
		t.Fatalf("node: labels %v allocatable %v", n.Labels, n.Status.Allocatable)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: "default", Annotations: map[string]string{AnnotationDuration: "1s"}},
		Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: resource.MustParse("1")}}}}}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phases []corev1.PodPhase
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "short", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if len(phases) == 0 || phases[len(phases)-1] != p.Status.Phase {
			phases = append(phases, p.Status.Phase)
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
	if err != nil || !containsPhase(phases, corev1.PodRunning) {
		t.Fatalf("pod phases %v: %v", phases, err)
	}
	if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "gpu-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("no node lease: %v", err)
	}

	// A pod keeping GPU 2 of gpu-2 70% busy shows in the node's utilisation report.
	busy := pod.DeepCopy()
	busy.Name, busy.Spec.NodeName = "busy", "gpu-2"
	busy.Annotations = map[string]string{v1alpha1.AnnotationGPUs: "2", AnnotationUtilization: "70"}
	if _, err := client.CoreV1().Pods("default").Create(ctx, busy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got = map[string]string{}
		for _, name := range []string{"gpu-1", "gpu-2"} {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got[name] = n.Annotations[v1alpha1.AnnotationGPUUtilization]
		}
		return got["gpu-1"] == "0,0,0,0" && got["gpu-2"] == "0,0,70,0", nil
	})
	if err != nil {
		t.Fatalf("utilisation reports %v, want gpu-1 idle and GPU 2 of gpu-2 at 70%%: %v", got, err)
	}
}

// Four GPUs: a training pod on 0 and 1, two notebooks halving 2 (one at 40% of its half),
// a half-GPU inference pod on 3 with its reservation beside it.
func TestUtilization(t *testing.T) {
	pod := func(class, gpus, share, util string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelClass: class},
			Annotations: map[string]string{v1alpha1.AnnotationGPUs: gpus}}}
		if share != "" {
			p.Annotations[v1alpha1.AnnotationGPUShare] = share
		}
		if util != "" {
			p.Annotations[AnnotationUtilization] = util
		}
		return p
	}
	reservation := pod("", "3", "", "")
	reservation.Namespace, reservation.Labels[v1alpha1.LabelReservation] = v1alpha1.SystemNamespace, "true"
	pods := []*corev1.Pod{
		pod(v1alpha1.ClassTrain, "0,1", "", ""),
		pod(v1alpha1.ClassInteractive, "2", "500", ""),
		pod(v1alpha1.ClassInteractive, "2", "500", "40"),
		pod(v1alpha1.ClassInference, "3", "500", ""),
		reservation,
	}
	if got := utilization(4, pods); got != "95,95,20,48" {
		t.Fatalf("utilisation %s, want 95,95,20,48", got)
	}
}

func containsPhase(ps []corev1.PodPhase, want corev1.PodPhase) bool {
	for _, p := range ps {
		if p == want {
			return true
		}
	}
	return false
}
