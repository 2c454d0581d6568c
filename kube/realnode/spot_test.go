package realnode_test

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/realnode"
)

// ptrString is *v, or "none".
func ptrString(v *int64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatInt(*v, 10)
}

// interruptionGrace is how long after a node's notice the scheduler stops its pods, in
// this package's tests.
const interruptionGrace = 12 * time.Second

// The checkpoint convention of docs/spot.md on the real node, as a training loop would keep
// it:
//
//	real-1 (4 GPUs)   tainted karpenter.sh/disrupted: it goes soon
//	  ckpt (1 GPU)    reads its annotations through a downward API volume between steps
//
// The scheduler writes allot.dev/interruption (when the pod will be stopped) on the pod; the
// kubelet puts it in the pod's file; the loop sees it and saves before that time. Then the
// pod is evicted with the pod's own grace period (20 s): the kubelet sends SIGTERM and keeps
// it, so the loop's handler, which takes 3 s, finishes, and the container exits 0.
func TestSpotNoticeOnTheRealNode(t *testing.T) {
	need(t)
	ctx := context.Background()
	const ns = "spot"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	queue(t, "spot-a", ns, 4)
	grace := int64(20)
	script := `trap 'echo "SIGTERM at $(date +%s)"; sleep 3; echo "saved after SIGTERM at $(date +%s)"; exit 0' TERM
echo "step 0 at $(date +%s)"
while ! grep -q '^allot.dev/interruption=' /etc/podinfo/annotations; do sleep 0.2; done
echo "notice $(grep '^allot.dev/interruption=' /etc/podinfo/annotations) seen at $(date +%s): checkpoint saved"
while :; do sleep 0.2; done`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ckpt", Namespace: ns, Labels: map[string]string{v1alpha1.LabelQueue: "spot-a"}},
		Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "train", Image: realnode.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", script},
				Resources:    corev1.ResourceRequirements{Limits: corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("1")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "podinfo", MountPath: "/etc/podinfo"}}}},
			Volumes: []corev1.Volume{{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}}}}}}}}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // where the test stopped before the eviction
		_ = client.CoreV1().Pods(ns).Delete(context.Background(), "ckpt", metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	// The pod as it ran: its UID names its log, which stays readable while the kubelet
	// stops it.
	var running *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "ckpt", metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			running = p
		}
		return running != nil, nil
	})
	if err != nil {
		t.Fatalf("ckpt never ran: %v; %s", err, events(ns, "ckpt"))
	}

	node, err := client.CoreV1().Nodes().Get(ctx, "real-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notice := corev1.Taint{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule}
	node.Spec.Taints = append(node.Spec.Taints, notice)
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tainted := time.Now()
	t.Cleanup(func() {
		// That taint off again, the node read afresh: its agent writes the node too.
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, "real-1", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(x corev1.Taint) bool { return x.Key == notice.Key })
			_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("real-1 keeps its taint %s: %v", notice.Key, err)
		}
	})

	// What the loop printed, kept as it grows: the pod goes once it has stopped.
	// And the grace its deletion gave the kubelet, read while it stops.
	var log string
	var given *int64
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, interruptionGrace+time.Minute, true, func(ctx context.Context) (bool, error) {
		if out, err := realnode.ContainerLog(running, "train"); err == nil && len(out) >= len(log) {
			log = out
		}
		p, err := client.CoreV1().Pods(ns).Get(ctx, "ckpt", metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp != nil && given == nil {
			given = p.DeletionGracePeriodSeconds
		}
		return err != nil || strings.Contains(log, "saved after SIGTERM"), nil
	})
	if err != nil {
		t.Fatalf("ckpt was not stopped: %v; its log:\n%s\nEvents: %s", err, log, events(ns, "ckpt"))
	}
	t.Logf("ckpt's log:\n%s", log)
	t.Logf("ckpt's Events:\n%s", events(ns, "ckpt"))
	at := func(what string) int64 {
		m := regexp.MustCompile(what + ` at (\d+)`).FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no %q in ckpt's log:\n%s", what, log)
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v
	}
	m := regexp.MustCompile(`notice allot.dev/interruption="([^"]+)" seen at (\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("the loop never saw the notice; its log:\n%s\nEvents: %s", log, events(ns, "ckpt"))
	}
	stopAt, err := time.Parse(time.RFC3339, m[1])
	if err != nil {
		t.Fatalf("allot.dev/interruption %q: %v", m[1], err)
	}
	seen, _ := strconv.ParseInt(m[2], 10, 64)
	term, saved := at("SIGTERM"), at("saved after SIGTERM")
	switch {
	case seen >= term:
		t.Errorf("the notice was seen at %d, not before SIGTERM at %d", seen, term)
	case term < stopAt.Unix()-1:
		t.Errorf("SIGTERM at %d, before the time the notice gave (%s)", term, stopAt.Format(time.RFC3339))
	case saved < term+3:
		t.Errorf("the handler's 3 s after SIGTERM (%d) ended at %d: the grace was not kept", term, saved)
	}
	if given == nil || *given != grace {
		t.Errorf("ckpt was deleted with a grace of %v s, want its own %d s", ptrString(given), grace)
	}
	if ev := events(ns, "ckpt"); !strings.Contains(ev, "InterruptionNotice") || !strings.Contains(ev, "Evicted") {
		t.Errorf("ckpt's Events: %s; want InterruptionNotice and Evicted", ev)
	}
	t.Logf("tainted at %s; notice seen %d s later, for %s; SIGTERM %d s after the notice was seen, exit %d s after it",
		tainted.Format(time.TimeOnly), seen-tainted.Unix(), stopAt.Format(time.TimeOnly), term-seen, saved-term)
}
