package realnode_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
)

// queue makes a Queue of quota GPUs admitting namespace ns, once.
func queue(t *testing.T, name, ns string, quota int32) {
	t.Helper()
	q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}
	q.Spec.GPU.Quota = quota
	q.Spec.Namespaces = []string{ns}
	if _, err := allotclient.NewForConfigOrDie(cluster.Config).AllotV1alpha1().Queues().Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sharingPod is a pod of Allot's asking half a GPU, of busybox containers that print what
// they got.
func sharingPod(ns, name, queueName string, containers ...corev1.Container) *corev1.Pod {
	p := shellPod(ns, name, containers...)
	p.Spec.NodeName = ""
	p.Spec.SchedulerName = v1alpha1.SchedulerName
	p.Labels = map[string]string{v1alpha1.LabelQueue: queueName}
	p.Annotations = map[string]string{v1alpha1.AnnotationGPUFraction: "0.5"}
	return p
}

// A sharing pod of two containers (the slice's and a sidecar) on a hami-core node starts
// whole under the real kubelet: every container the webhook gives the /dev/shm mount,
// whose subPathExpr reads ALLOT_SHM_DIR, must have that variable, or the kubelet refuses
// to make the container (CreateContainerConfigError: missing value for ALLOT_SHM_DIR).
// Both containers of the pod share that one /dev/shm.
//
//	real-1 (hami-core, cdi): GPU 0: nb 0.5 [main: the slice] [sidecar: no device]
func TestSharingPodWithASidecarStarts(t *testing.T) {
	need(t)
	queue(t, "team-sidecar", "sidecar", 4)
	seen := runAndRead(t, sharingPod("sidecar", "nb", "team-sidecar", script("main"), script("sidecar")), "main", "sidecar")
	for _, c := range []string{"main", "sidecar"} {
		if got := seen[c].Env["ALLOT_SHM_DIR"]; got == "" {
			t.Errorf("%s: no ALLOT_SHM_DIR (env %v)", c, seen[c].Env)
		}
	}
	if seen["main"].Env["ALLOT_SHM_DIR"] != seen["sidecar"].Env["ALLOT_SHM_DIR"] {
		t.Errorf("main's /dev/shm is %q, the sidecar's %q: one pod, one /dev/shm", seen["main"].Env["ALLOT_SHM_DIR"], seen["sidecar"].Env["ALLOT_SHM_DIR"])
	}
	if got := seen["sidecar"].Env["NVIDIA_VISIBLE_DEVICES"]; got != "void" {
		t.Errorf("sidecar's NVIDIA_VISIBLE_DEVICES is %q, want void", got)
	}
	if got := seen["sidecar"].NVIDIA(); len(got) != 0 {
		t.Errorf("sidecar sees %v", got)
	}
}

// waitGone waits until the pod is gone from the API server.
func waitGone(t *testing.T, ns, name string) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err != nil, nil
	})
}
