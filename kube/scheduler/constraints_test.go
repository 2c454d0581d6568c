package scheduler

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/kube/kubetest"
)

// The Kubernetes scheduling contract on a real API server: two simulated nodes of 4 GPUs,
// dgx-1 and dgx-2. Each step shows a constraint kind placing the pod only where it
// allows, the pod waiting with kube-scheduler's words when nothing allows it, and the pod
// starting once the cluster changes.
func TestKubernetesConstraints(t *testing.T) {
	e := newEnv(t, 2, 4)
	e.queue(t, "q", 8)
	defer e.startScheduler(t)()
	pods := e.Client.CoreV1().Pods("default")
	create := func(t *testing.T, name string, gpus int64, edit func(*corev1.Pod)) {
		t.Helper()
		p := kubetest.PodSpec{Name: name, Queue: "q", GPUs: gpus}.Pod()
		if edit != nil {
			edit(p)
		}
		if _, err := pods.Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeOf := func(name string) string {
		p, err := pods.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return p.Spec.NodeName
	}
	landsOn := func(t *testing.T, name, node string) {
		t.Helper()
		e.waitFor(t, name+" bound to "+node, func() (bool, string) {
			p, err := pods.Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					return false, c.Message
				}
			}
			return p.Spec.NodeName == node, "on " + p.Spec.NodeName
		})
	}
	waitsWith := func(t *testing.T, name string, words ...string) {
		t.Helper()
		e.waitFor(t, name+" waiting with its reason", func() (bool, string) {
			p, err := pods.Get(e.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Spec.NodeName != "" {
				t.Fatalf("%s was bound to %s", name, p.Spec.NodeName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					for _, w := range words {
						if !strings.Contains(c.Message, w) {
							return false, c.Message
						}
					}
					return true, ""
				}
			}
			return false, "no PodScheduled condition"
		})
	}
	patchNode := func(t *testing.T, node, patch string, sub ...string) {
		t.Helper()
		if _, err := e.Client.CoreV1().Nodes().Patch(e.ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, sub...); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(t *testing.T, name string) {
		t.Helper()
		if err := pods.Delete(e.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("nodeSelector", func(t *testing.T) {
		create(t, "sel", 1, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "dgx-2"} })
		landsOn(t, "sel", "dgx-2")
		create(t, "sel-none", 1, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "z1"} })
		waitsWith(t, "sel-none", "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector")
		patchNode(t, "dgx-1", `{"metadata":{"labels":{"zone":"z1"}}}`)
		landsOn(t, "sel-none", "dgx-1")
		gone(t, "sel")
		gone(t, "sel-none")
	})

	t.Run("taints and tolerations", func(t *testing.T) {
		patchNode(t, "dgx-1", `{"spec":{"taints":[{"key":"test","value":"x","effect":"NoSchedule"}]}}`)
		create(t, "taint", 1, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "dgx-1"} })
		waitsWith(t, "taint", "1 node(s) had untolerated taint(s)", "1 node(s) didn't match Pod's node affinity/selector")
		create(t, "tolerant", 1, func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "dgx-1"}
			p.Spec.Tolerations = []corev1.Toleration{{Key: "test", Operator: corev1.TolerationOpEqual, Value: "x", Effect: corev1.TaintEffectNoSchedule}}
		})
		landsOn(t, "tolerant", "dgx-1")
		// A pod with no constraint avoids the tainted node.
		create(t, "plain", 4, nil)
		landsOn(t, "plain", "dgx-2")
		patchNode(t, "dgx-1", `{"spec":{"taints":null}}`)
		landsOn(t, "taint", "dgx-1")
		for _, n := range []string{"taint", "tolerant", "plain"} {
			gone(t, n)
		}
	})

	t.Run("required node affinity with matchFields", func(t *testing.T) {
		create(t, "aff", 1, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu-class", Operator: corev1.NodeSelectorOpIn, Values: []string{"big"}}},
					MatchFields:      []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"dgx-2"}}},
				}}}}}
		})
		waitsWith(t, "aff", "2 node(s) didn't match Pod's node affinity/selector")
		patchNode(t, "dgx-1", `{"metadata":{"labels":{"gpu-class":"big"}}}`)
		patchNode(t, "dgx-2", `{"metadata":{"labels":{"gpu-class":"big"}}}`)
		landsOn(t, "aff", "dgx-2")
		gone(t, "aff")
	})

	t.Run("gang with required anti-affinity lands one pod per node", func(t *testing.T) {
		for _, n := range []string{"ring-0", "ring-1"} {
			create(t, n, 1, func(p *corev1.Pod) {
				p.Labels["app"] = "ring"
				p.Labels["allot.dev/pod-group"] = "ring"
				p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ring"}}, TopologyKey: corev1.LabelHostname}}}}
			})
		}
		e.waitFor(t, "the ring on two nodes", func() (bool, string) {
			a, b := nodeOf("ring-0"), nodeOf("ring-1")
			return a != "" && b != "" && a != b, a + " " + b
		})
		create(t, "ring-2", 1, func(p *corev1.Pod) {
			p.Labels["app"] = "ring"
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ring"}}, TopologyKey: corev1.LabelHostname}}}}
		})
		waitsWith(t, "ring-2", "2 node(s) didn't match pod anti-affinity rules")
		gone(t, "ring-0")
		e.waitFor(t, "ring-2 bound", func() (bool, string) { return nodeOf("ring-2") != "", "" })
		for _, n := range []string{"ring-1", "ring-2"} {
			gone(t, n)
		}
	})

	t.Run("required topology spread", func(t *testing.T) {
		for _, n := range []string{"spread-0", "spread-1"} {
			create(t, n, 1, func(p *corev1.Pod) {
				p.Labels["app"] = "spread"
				p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
					WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
			})
		}
		// Bin-packing alone would put both on one node.
		e.waitFor(t, "one spread pod per node", func() (bool, string) {
			a, b := nodeOf("spread-0"), nodeOf("spread-1")
			return a != "" && b != "" && a != b, a + " " + b
		})
		gone(t, "spread-0")
		gone(t, "spread-1")
	})

	t.Run("host ports and extended resources", func(t *testing.T) {
		port := func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "dgx-1"}
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080, Protocol: corev1.ProtocolTCP}}
		}
		create(t, "port-0", 1, port)
		landsOn(t, "port-0", "dgx-1")
		create(t, "port-1", 1, port)
		waitsWith(t, "port-1", "1 node(s) didn't have free ports for the requested pod ports")
		gone(t, "port-0")
		landsOn(t, "port-1", "dgx-1")
		gone(t, "port-1")

		create(t, "nic", 1, func(p *corev1.Pod) {
			q := resource.MustParse("1")
			p.Spec.Containers[0].Resources.Requests["example.com/nic"] = q
			p.Spec.Containers[0].Resources.Limits["example.com/nic"] = q
		})
		waitsWith(t, "nic", "2 Insufficient example.com/nic")
		raw, _ := json.Marshal(map[string]any{"status": map[string]any{"capacity": map[string]string{"example.com/nic": "1"},
			"allocatable": map[string]string{"example.com/nic": "1"}}})
		patchNode(t, "dgx-2", string(raw), "status")
		landsOn(t, "nic", "dgx-2")
		gone(t, "nic")
	})

	t.Run("cordoned node", func(t *testing.T) {
		patchNode(t, "dgx-1", `{"spec":{"unschedulable":true}}`)
		create(t, "cordoned", 1, func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "dgx-1"} })
		waitsWith(t, "cordoned", "1 node(s) were unschedulable")
		patchNode(t, "dgx-1", `{"spec":{"unschedulable":false}}`)
		landsOn(t, "cordoned", "dgx-1")
		gone(t, "cordoned")
	})

	t.Run("required pod affinity", func(t *testing.T) {
		create(t, "follower", 1, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}}, TopologyKey: corev1.LabelHostname}}}}
		})
		waitsWith(t, "follower", "node(s) didn't match pod affinity rules")
		create(t, "cache", 1, func(p *corev1.Pod) {
			p.Labels["app"] = "cache"
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "dgx-2"}
		})
		landsOn(t, "cache", "dgx-2")
		landsOn(t, "follower", "dgx-2")
		gone(t, "cache")
		gone(t, "follower")
	})

	t.Run("ephemeral storage and init containers", func(t *testing.T) {
		create(t, "scratch", 1, func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("600Gi")
		})
		waitsWith(t, "scratch", "2 Insufficient ephemeral-storage")
		gone(t, "scratch")
		// An init container asking for more CPU than the node has: counted as kube-scheduler
		// counts it (the largest of init and regular containers).
		create(t, "big-init", 1, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "fetch", Image: "busybox",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}}}}
		})
		waitsWith(t, "big-init", "needs 100 CPU on one node")
		gone(t, "big-init")
	})

	t.Run("a volume pinned to a node", func(t *testing.T) {
		// A bound pair pinned to a node, as the PersistentVolume controller leaves it (the
		// embedded cluster does not run that controller).
		boundDisk := func(claim, disk, node string) {
			class := "local"
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default",
				Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}}, Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class, VolumeName: disk, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
			pvc, err := e.Client.CoreV1().PersistentVolumeClaims("default").Create(e.ctx, pvc, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pvc.Status.Phase = corev1.ClaimBound
			if _, err := e.Client.CoreV1().PersistentVolumeClaims("default").UpdateStatus(e.ctx, pvc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: disk}, Spec: corev1.PersistentVolumeSpec{
				Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, StorageClassName: "local",
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + disk}},
				ClaimRef:               &corev1.ObjectReference{Namespace: "default", Name: claim, UID: pvc.UID},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
			}}
			pv, err = e.Client.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pv.Status.Phase = corev1.VolumeBound
			if _, err := e.Client.CoreV1().PersistentVolumes().UpdateStatus(e.ctx, pv, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		boundDisk("data", "disk-1", "dgx-2")
		boundDisk("data-gone", "disk-2", "dgx-9")
		create(t, "uses-disk", 1, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		})
		landsOn(t, "uses-disk", "dgx-2")
		create(t, "uses-lost-disk", 1, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-gone"}}}}
		})
		waitsWith(t, "uses-lost-disk", "2 node(s) didn't match PersistentVolume's node affinity")
		gone(t, "uses-disk")
		gone(t, "uses-lost-disk")
	})

	t.Run("reclaim evicts only where the reclaiming pod may run", func(t *testing.T) {
		e.queue(t, "borrower", 0)
		e.queue(t, "owner", 4)
		for i := 0; i < 8; i++ {
			e.pod(t, fmt.Sprintf("borrow-%d", i), "borrower", 1, nil)
		}
		onNode := func(node string) int {
			return e.count(t, func(p *corev1.Pod) bool {
				return strings.HasPrefix(p.Name, "borrow-") && p.Spec.NodeName == node && p.DeletionTimestamp == nil
			})
		}
		e.waitFor(t, "the borrower on all 8 GPUs", func() (bool, string) {
			a, b := onNode("dgx-1"), onNode("dgx-2")
			return a == 4 && b == 4, fmt.Sprintf("%d + %d", a, b)
		})
		create(t, "owner-pinned", 2, func(p *corev1.Pod) {
			p.Labels["allot.dev/queue"] = "owner"
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "dgx-2"}
		})
		landsOn(t, "owner-pinned", "dgx-2")
		if a := onNode("dgx-1"); a != 4 {
			t.Fatalf("%d borrower pods left on dgx-1, want all 4: the reclaim evicted where the owner may not run", a)
		}
		if b := onNode("dgx-2"); b != 2 {
			t.Fatalf("%d borrower pods left on dgx-2, want 2", b)
		}
	})

	t.Run("preferred node affinity ranks nodes that are otherwise equal", func(t *testing.T) {
		// Both nodes are full of GPU pods now, so a CPU-only pod leaves the same GPUs free
		// on either, and bin-packing by CPU picks dgx-1 (it has less CPU left) ...
		create(t, "no-preference", 0, nil)
		landsOn(t, "no-preference", "dgx-1")
		// ... even more so now; a pod that prefers dgx-2's label goes there all the same.
		patchNode(t, "dgx-2", `{"metadata":{"labels":{"disk":"ssd"}}}`)
		create(t, "prefers-ssd", 0, func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}}
		})
		landsOn(t, "prefers-ssd", "dgx-2")
	})
}
