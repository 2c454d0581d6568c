package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"pgregory.net/rapid"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
)

// TestTrimmedPodsScheduleAlike: other schedulers' pods, trimmed as the pod informer caches
// them, give what the untrimmed pods give: the same engine snapshot (after buildSnapshot and
// constrain: node room, filters), the same answers of kube-scheduler's in-cycle plugins for
// a random pod of Allot's on every node, the same plan, and the same node view
// kube-scheduler's plugins read (requested resources, host ports, claims, pods with
// affinity). The pods carry, at random, every field the scheduler reads and some it does not
// (images, environment, token volumes, containers' states, tolerations): a new read of a
// trimmed field fails here.
func TestTrimmedPodsScheduleAlike(t *testing.T) {
	ctx := context.Background()
	checker, factory := newChecker(t)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	queue := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: 1000}}}
	now := time.Unix(1e9, 0)
	rapid.Check(t, func(rt *rapid.T) {
		nodes, others := genCluster(rt)
		for i, p := range others {
			decorateOther(rt, p, i, now)
		}
		for k := rapid.IntRange(0, 3).Draw(rt, "unbound others"); k > 0; k-- {
			p := basePod(fmt.Sprintf("waiting-other-%d", k), "default-scheduler")
			decorateOther(rt, p, 100+k, now)
			others = append(others, p)
		}
		mine := genAllotPod(rt)
		trimmed := make([]*corev1.Pod, len(others))
		for i, p := range others {
			o, err := trimObject(p.DeepCopy())
			if err != nil {
				rt.Fatal(err)
			}
			trimmed[i] = o.(*corev1.Pod)
		}
		if o, _ := trimObject(mine); o.(*corev1.Pod) != mine || !reflect.DeepEqual(o, mine) {
			rt.Fatalf("Allot's pod was trimmed")
		}
		type outcome struct {
			snap      *engine.Snapshot
			releasing map[engine.NodeID]map[int]string
			evicted   map[engine.JobID]bool
			fits      map[engine.NodeID]bool
			plan      *engine.Plan
		}
		run := func(others []*corev1.Pod) outcome {
			all := append(slices.Clone(others), mine.DeepCopy())
			s, idx := buildSnapshot(now, slices.Clone(nodes), slices.Clone(all), []*v1alpha1.Queue{queue}, nil, nil, nil)
			constrain(ctx, checker, s, idx, nodes, all, nil)
			out := outcome{fits: map[engine.NodeID]bool{}, releasing: idx.releasing, evicted: idx.evicted}
			if s.Rules != nil {
				for _, n := range nodes {
					out.fits[engine.NodeID(n.Name)] = s.Rules.Fits(engine.PodID("default/"+mine.Name), engine.NodeID(n.Name))
				}
			}
			out.plan = engine.New(engine.Options{}).Schedule(s)
			s.Rules = nil
			out.snap = s
			return out
		}
		whole, trim := run(others), run(trimmed)
		if !reflect.DeepEqual(whole.snap, trim.snap) {
			rt.Fatalf("snapshots differ:\nwhole %+v\ntrimmed %+v", whole.snap, trim.snap)
		}
		if !reflect.DeepEqual(whole.releasing, trim.releasing) || !reflect.DeepEqual(whole.evicted, trim.evicted) {
			rt.Fatalf("pods leaving differ: whole %v %v, trimmed %v %v", whole.releasing, whole.evicted, trim.releasing, trim.evicted)
		}
		if !reflect.DeepEqual(whole.fits, trim.fits) {
			rt.Fatalf("in-cycle rules differ: whole %v, trimmed %v", whole.fits, trim.fits)
		}
		if !reflect.DeepEqual(whole.plan.Binds, trim.plan.Binds) || !reflect.DeepEqual(whole.plan.Pending, trim.plan.Pending) {
			rt.Fatalf("plans differ:\nwhole %+v\ntrimmed %+v", whole.plan, trim.plan)
		}
		// kube-scheduler's own view of each node, as its plugins read it.
		a, b := cache.NewSnapshot(others, nodes), cache.NewSnapshot(trimmed, nodes)
		for _, n := range nodes {
			na, _ := a.NodeInfos().Get(n.Name)
			nb, _ := b.NodeInfos().Get(n.Name)
			if d := nodeInfoDiff(na.(*framework.NodeInfo), nb.(*framework.NodeInfo)); d != "" {
				rt.Fatalf("node %s: kube-scheduler's view differs: %s", n.Name, d)
			}
		}
	})
}

// nodeInfoDiff names what differs between two views of a node, apart from the pods'
// objects themselves.
func nodeInfoDiff(a, b *framework.NodeInfo) string {
	switch {
	case !reflect.DeepEqual(a.Requested, b.Requested):
		return fmt.Sprintf("requested %+v vs %+v", a.Requested, b.Requested)
	case !reflect.DeepEqual(a.NonZeroRequested, b.NonZeroRequested):
		return fmt.Sprintf("non-zero requested %+v vs %+v", a.NonZeroRequested, b.NonZeroRequested)
	case !reflect.DeepEqual(a.UsedPorts, b.UsedPorts):
		return fmt.Sprintf("ports %v vs %v", a.UsedPorts, b.UsedPorts)
	case !reflect.DeepEqual(a.PVCRefCounts, b.PVCRefCounts):
		return fmt.Sprintf("claims %v vs %v", a.PVCRefCounts, b.PVCRefCounts)
	case len(a.Pods) != len(b.Pods) || len(a.PodsWithAffinity) != len(b.PodsWithAffinity) ||
		len(a.PodsWithRequiredAntiAffinity) != len(b.PodsWithRequiredAntiAffinity):
		return "pods with affinity"
	}
	for i := range a.Pods {
		pa, pb := a.Pods[i].(*framework.PodInfo), b.Pods[i].(*framework.PodInfo)
		if !reflect.DeepEqual(pa.RequiredAffinityTerms, pb.RequiredAffinityTerms) || !reflect.DeepEqual(pa.RequiredAntiAffinityTerms, pb.RequiredAntiAffinityTerms) ||
			!reflect.DeepEqual(pa.PreferredAffinityTerms, pb.PreferredAffinityTerms) || !reflect.DeepEqual(pa.PreferredAntiAffinityTerms, pb.PreferredAntiAffinityTerms) {
			return "affinity terms of " + pa.Pod.Name
		}
		if !reflect.DeepEqual(pa.Pod.Labels, pb.Pod.Labels) || pa.Pod.Namespace != pb.Pod.Namespace {
			return "labels of " + pa.Pod.Name
		}
	}
	return ""
}

// decorateOther gives another scheduler's pod, at random, fields the scheduler reads (GPUs
// with Allot's device annotations, an overhead, a sidecar, host ports, a claim, a node
// pool, a priority, a resize, an eviction under way, its end) and fields it does not.
func decorateOther(t *rapid.T, p *corev1.Pod, i int, now time.Time) {
	p.UID = p.UID + "-uid"
	p.ResourceVersion = fmt.Sprint(i + 1)
	p.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"Pod"}`}
	c := &p.Spec.Containers[0]
	c.Image, c.Command, c.Env = "registry.example/app:1", []string{"/bin/app"}, []corev1.EnvVar{{Name: "A", Value: "b"}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "token", MountPath: "/var/run/secrets"}}
	c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: 9090, Protocol: corev1.ProtocolTCP})
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{}}}
	c.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(rapid.Int64Range(0, 4).Draw(t, "other mem")<<30, resource.BinarySI)
	p.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	p.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	p.Spec.ServiceAccountName, p.Spec.DNSPolicy = "default", corev1.DNSClusterFirst
	p.Status.PodIP, p.Status.QOSClass, p.Status.Message = "10.0.0.1", corev1.PodQOSBurstable, "started"
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, Message: "ready", LastTransitionTime: metav1.NewTime(now)}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ImageID: "sha256:1", ContainerID: "containerd://1", Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now)}}}}
	if q, ok := c.Resources.Requests[v1alpha1.GPUResource]; ok && rapid.Bool().Draw(t, "gpu indices") {
		p.Annotations[v1alpha1.AnnotationGPUs] = fmt.Sprint(rapid.IntRange(0, int(q.Value())).Draw(t, "gpu index"))
	}
	if rapid.IntRange(0, 3).Draw(t, "overhead") == 0 {
		p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	}
	if rapid.IntRange(0, 3).Draw(t, "sidecar") == 0 {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: &always,
			Ports:     []corev1.ContainerPort{{ContainerPort: 15001, HostPort: 15001, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}
	}
	if rapid.IntRange(0, 3).Draw(t, "claim") == 0 {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	}
	if rapid.IntRange(0, 3).Draw(t, "gang") == 0 {
		p.Labels[LabelPodGroup] = "g" // a gang of Allot's label, on a pod it does not schedule
	}
	if rapid.IntRange(0, 3).Draw(t, "pool") == 0 {
		p.Spec.NodeSelector = map[string]string{LabelNodePool: "pool-a"}
	}
	if rapid.Bool().Draw(t, "priority") {
		pr := int32(rapid.IntRange(0, 1000).Draw(t, "priority value"))
		p.Spec.Priority = &pr
	}
	if rapid.IntRange(0, 3).Draw(t, "resized") == 0 {
		p.Status.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
		p.Status.ContainerStatuses[0].Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}
		if rapid.Bool().Draw(t, "infeasible") {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue,
				Reason: corev1.PodReasonInfeasible, Message: "no room"})
		}
	}
	switch rapid.IntRange(0, 5).Draw(t, "state") {
	case 0:
		d := metav1.NewTime(now.Add(-time.Duration(rapid.IntRange(0, 90).Draw(t, "deleted ago")) * time.Second))
		p.DeletionTimestamp = &d
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", Message: "evicted"})
	case 1:
		p.Status.Phase = rapid.SampledFrom([]corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}).Draw(t, "end")
	}
	if p.Spec.NodeName == "" {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}
}
