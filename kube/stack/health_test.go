package stack_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
)

// A GPU comes back: an earlier run of the agent left GPU 0 listed as failed (it was reset
// since), and the device plugin takes GPU 2 out and later lists it again. The agent clears
// the first when it starts and the second when the plugin lists it, and a pod of all four
// GPUs, which waits while one is out, runs once both count again.
//
//	dgx-1: GPU 0 (stale failure) · GPU 1 · GPU 2 (plugin out, then back) · GPU 3
func TestRecoveredGPUsCountAgain(t *testing.T) {
	e, devices := kubetest.StartWithDevices(t, 1, 4, "")
	stale := `[{"index":0,"uuid":"GPU-gone","reason":"XID 79 (GPU has fallen off the bus)"}]`
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationGPUUnhealthy + `":` + fmt.Sprintf("%q", stale) + `}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	devices.SetPluginHealth("dgx-1", 2, false)
	if err := devices.RunAgents(e.Ctx, e.Client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	health := func() string {
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		return n.Annotations[v1alpha1.AnnotationGPUUnhealthy]
	}
	e.WaitFor(t, "GPU 0's stale failure gone, GPU 2 out by the plugin", func() (bool, string) {
		bad, err := v1alpha1.ParseUnhealthy(health())
		return err == nil && len(bad) == 1 && bad[0].Index == 2 && bad[0].Reason == "the NVIDIA device plugin reports it unhealthy", health()
	})
	e.Queue(t, "team-a", 4, nil)
	e.MustPod(t, kubetest.PodSpec{Name: "four", Queue: "team-a", GPUs: 4})
	time.Sleep(2 * time.Second)
	if p := e.Pods(t, "default")["four"]; kubetest.Bound(p) {
		t.Fatalf("four bound to %s with GPU 2 out", p.Spec.NodeName)
	}
	devices.SetPluginHealth("dgx-1", 2, true)
	e.WaitFor(t, "GPU 2 back and four running", func() (bool, string) {
		p := e.Pods(t, "default")["four"]
		return health() == "" && kubetest.Running(p), fmt.Sprintf("health %q, four %s", health(), p.Status.Phase)
	})
}

// XIDs an admin lists are ignored: XID 63 (a row remapping event, which fails a device by
// default) on GPU 1 fails nothing once listed; XID 48 on GPU 2 fails GPU 2.
func TestIgnoredXIDsFailNoDevice(t *testing.T) {
	e, devices := kubetest.StartWithDevices(t, 1, 4, "")
	devices.IgnoredXIDs = []uint64{63}
	if err := devices.RunAgents(e.Ctx, e.Client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	nodeUUIDs(t, e, "dgx-1") // the agent is up
	devices.Machine("dgx-1").RaiseXID(1, 63)
	devices.Machine("dgx-1").RaiseXID(2, 48)
	e.WaitFor(t, "GPU 2 failed, GPU 1 not", func() (bool, string) {
		n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
		bad, err := v1alpha1.ParseUnhealthy(n.Annotations[v1alpha1.AnnotationGPUUnhealthy])
		return err == nil && len(bad) == 1 && bad[0].Index == 2, fmt.Sprint(bad, err)
	})
	// Both events were raised before either was seen: GPU 1's must not follow.
	time.Sleep(1500 * time.Millisecond)
	n, _ := e.Client.CoreV1().Nodes().Get(e.Ctx, "dgx-1", metav1.GetOptions{})
	if bad, _ := v1alpha1.ParseUnhealthy(n.Annotations[v1alpha1.AnnotationGPUUnhealthy]); len(bad) != 1 {
		t.Errorf("failed devices %v, want GPU 2 only", bad)
	}
}

// Where the pool's policy is evict, a pod on a GPU that fails is deleted with an Event
// saying why, so that its owner starts it again on a healthy GPU; a Job's pod comes back
// on another device.
//
//	dgx-1: GPU 3 fails under train's pod
func TestPodOnFailedGPUIsEvictedWhereThePoolSaysSo(t *testing.T) {
	e, devices := kubetest.StartWithDevices(t, 1, 4, "")
	devices.OnGPUFailure = "evict"
	if err := devices.RunAgents(e.Ctx, e.Client, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Local(e.Ctx, e.Cluster.Config, e.Dir, scheduler.Options{Interval: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	uuids := nodeUUIDs(t, e, "dgx-1")
	e.Queue(t, "team-a", 4, nil)
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{v1alpha1.GPUResource: resource.MustParse("1")}}}}}}}}
	if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var first *corev1.Pod
	e.WaitFor(t, "train's pod running with its device recorded", func() (bool, string) {
		for _, p := range e.Pods(t, "default") {
			if kubetest.Running(p) && p.Annotations[v1alpha1.AnnotationGPUDevices] != "" {
				first = p
				return true, ""
			}
		}
		return false, fmt.Sprint(len(e.Pods(t, "default")), " pods")
	})
	failed := slices.Index(uuids, first.Annotations[v1alpha1.AnnotationGPUDevices])
	patch := []byte(`{"metadata":{"annotations":{"` + simnode.AnnotationFailGPU + `":"` + fmt.Sprint(failed) + `"}}}`)
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the first pod gone, told why, and a new one running on another GPU", func() (bool, string) {
		pods := e.Pods(t, "default")
		var state []string
		again := false
		for name, p := range pods {
			state = append(state, fmt.Sprintf("%s %s %q", name, p.Status.Phase, p.Annotations[v1alpha1.AnnotationGPUDevices]))
			if p.UID != first.UID && kubetest.Running(p) && p.Annotations[v1alpha1.AnnotationGPUDevices] != "" &&
				p.Annotations[v1alpha1.AnnotationGPUDevices] != uuids[failed] {
				again = true
			}
		}
		_, stays := pods[first.Name]
		ev := strings.Join(e.Events(t, "default", first.Name), "\n")
		return !stays && again && strings.Contains(ev, "is deleted so that its owner starts it again on a healthy GPU"), strings.Join(state, ", ") + " | " + ev
	})
}
