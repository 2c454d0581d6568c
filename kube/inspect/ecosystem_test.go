package inspect

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// TestEcosystemWorkloads: the pods of other projects' workloads are listed under the
// workload people made: a LeaderWorkerSet (its pods are owned by StatefulSets, the
// workers' by a leader pod), the RayJob that made a RayCluster, the TrainJob that made a
// JobSet, the Knative Service and the InferenceService whose Deployments run them.
func TestEcosystemWorkloads(t *testing.T) {
	q := func(extra map[string]string) map[string]string {
		l := map[string]string{v1alpha1.LabelQueue: "team-a"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	allot := corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName}}
	lws := map[string]string{"leaderworkerset.sigs.k8s.io/name": "llm"}
	knative := map[string]string{"serving.knative.dev/service": "hello"}
	pods := []*corev1.Pod{
		{ObjectMeta: objectMeta("llm-0", ctrl("StatefulSet", "llm"), q(lws))},
		{ObjectMeta: objectMeta("llm-0-1", ctrl("StatefulSet", "llm-0"), q(lws))},
		{ObjectMeta: objectMeta("rc-head", ctrl("RayCluster", "rj-raycluster"), q(nil))},
		{ObjectMeta: objectMeta("tune-node-0-0", ctrl("Job", "tune-node-0"), q(nil))},
		{ObjectMeta: objectMeta("hello-x", ctrl("ReplicaSet", "hello-00001-deployment-a"), q(knative))},
	}
	jobs := []*batchv1.Job{{ObjectMeta: objectMeta("tune-node-0", ctrl("JobSet", "tune"), q(nil)), Spec: batchv1.JobSpec{Template: allot}}}
	jobs[0].UID = "Job-tune-node-0"
	deps := []*appsv1.Deployment{{ObjectMeta: objectMeta("hello-00001-deployment", ctrl("Revision", "hello-00001"), knative),
		Spec: appsv1.DeploymentSpec{Template: allot}}}
	other := func(kind string, m metav1.ObjectMeta) Other {
		return Other{PartialObjectMetadata: metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: kind}, ObjectMeta: m}}
	}
	others := []Other{
		other("RayCluster", objectMeta("rj-raycluster", ctrl("RayJob", "rj"), nil)),
		other("JobSet", objectMeta("tune", ctrl("TrainJob", "tune"), nil)),
		other("LeaderWorkerSet", objectMeta("llm", nil, nil)),
		// Suspended by allot suspend: no pod, still listed.
		{PartialObjectMetadata: metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "RayCluster"},
			ObjectMeta: objectMeta("idle", nil, nil)}, Ours: true, Suspended: true},
		// Another scheduler's: not listed.
		other("RayCluster", objectMeta("theirs", nil, nil)),
	}
	others[0].UID, others[1].UID = "RayCluster-rj-raycluster", "JobSet-tune"
	ws := BuildWorkloads(Objects{Pods: pods, Jobs: jobs, Deployments: deps, Others: others})
	var got []string
	for _, w := range ws {
		got = append(got, w.Ref()+" "+w.Type+" "+string(w.UID)+" "+w.Status)
	}
	want := []string{"Service/hello inference  Pending", "RayCluster/idle interactive idle Suspended", "LeaderWorkerSet/llm inference llm Pending",
		"RayJob/rj distributed RayJob-rj Pending", "TrainJob/tune distributed TrainJob-tune Pending"}
	if !slices.Equal(got, want) {
		t.Fatalf("workloads\n%q\nwant\n%q", got, want)
	}
	if llm := ws[2]; len(llm.Pods) != 2 {
		t.Fatalf("llm has %d pods, want its leader and worker", len(llm.Pods))
	}
	if tune := ws[4]; !slices.Contains(tune.Owners, Ref{Kind: "JobSet", Name: "tune", UID: types.UID("JobSet-tune")}) {
		t.Fatalf("TrainJob tune's owners %v: its JobSet's events are its own", tune.Owners)
	}
}
