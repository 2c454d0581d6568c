package deploy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/deploy"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/stack"
)

// TestMulticlusterRolesAreEnough installs the chart's roles on two real API servers, a
// manager (multicluster.manager) and a worker (multicluster.worker), and runs Allot there
// as the chart's ServiceAccounts: the manager's scheduler as allot, with the worker's
// kubeconfig naming allot-manager-access; the worker's scheduler and fence as allot. A Job
// submitted to the manager is dispatched, runs on the worker and is mirrored back; its
// deletion removes the copy; and the manager's identity on the worker can read no Secret
// and delete no pod.
func TestMulticlusterRolesAreEnough(t *testing.T) {
	objs := deploy.Render(t, "--set", "multicluster.manager=true", "--set", "multicluster.worker=true")
	base := []string{"ServiceAccount/allot", "ClusterRole/allot", "ClusterRoleBinding/allot",
		"kube-system/Role/allot-leader-election", "kube-system/RoleBinding/allot-leader-election"}
	mgr := kubetest.StartNodes(t)
	install(t, mgr, objs, append(base, "ClusterRole/allot-multicluster-manager", "ClusterRoleBinding/allot-multicluster-manager",
		"Role/allot-multicluster-secrets", "RoleBinding/allot-multicluster-secrets",
		"ValidatingAdmissionPolicy/allot-dispatch", "ValidatingAdmissionPolicyBinding/allot-dispatch")...)
	worker := kubetest.Start(t, 1, 8)
	install(t, worker, objs, append(base, "ServiceAccount/allot-manager-access", "ClusterRole/allot-multicluster-access",
		"ClusterRoleBinding/allot-multicluster-access", "Role/allot-multicluster-lease", "RoleBinding/allot-multicluster-lease",
		"ValidatingAdmissionPolicy/allot-dispatch-origin", "ValidatingAdmissionPolicyBinding/allot-dispatch-origin")...)
	if _, err := stack.LocalWith(worker.Ctx, worker.Cluster.Config, serviceAccount(worker, "allot"), worker.Dir, "", stack.Options{
		Scheduler: scheduler.Options{Interval: 200 * time.Millisecond}, FenceNamespace: "allot-system"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stack.LocalWith(mgr.Ctx, mgr.Cluster.Config, serviceAccount(mgr, "allot"), mgr.Dir, "", stack.Options{
		Scheduler: scheduler.Options{Interval: 200 * time.Millisecond}, Manager: &multicluster.Options{Interval: 300 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	// The worker's kubeconfig, as the identity the chart made there for the manager.
	kc, err := localcluster.Kubeconfig(serviceAccount(worker, "allot-manager-access"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := mgr.Ctx
	if _, err := mgr.Client.CoreV1().Secrets("allot-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "allot-system"},
		Data: map[string][]byte{"kubeconfig": kc}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mgr.Allot.AllotV1alpha1().WorkerClusters().Create(ctx, &v1alpha1.WorkerCluster{ObjectMeta: metav1.ObjectMeta{Name: "w1"},
		Spec: v1alpha1.WorkerClusterSpec{KubeconfigSecret: v1alpha1.SecretKey{Namespace: "allot-system", Name: "w1"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mgr.Queue(t, "team-a", 4, nil)
	tmpl := kubetest.PodSpec{GPUs: 2}.Pod()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.SchedulerName = ""
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: batchv1.JobSpec{ManagedBy: ptr.To(multicluster.ManagedBy), Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
	if _, err := mgr.Client.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mgr.WaitFor(t, "the Job dispatched to w1, running there, its status mirrored", func() (bool, string) {
		j, err := mgr.Client.BatchV1().Jobs("default").Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		running := worker.Count(t, "default", kubetest.Running)
		return j.Annotations[multicluster.AnnotationCluster] == "w1" && running == 1 && j.Status.Active == 1,
			fmt.Sprintf("cluster %q, %d running on w1, active %d, waiting %q", j.Annotations[multicluster.AnnotationCluster], running, j.Status.Active,
				j.Annotations[multicluster.AnnotationWaiting])
	})
	q, err := worker.Allot.AllotV1alpha1().Queues().Get(ctx, "team-a", metav1.GetOptions{})
	if err != nil || q.Labels[multicluster.LabelManagedBy] != "allot-manager" {
		t.Fatalf("team-a on the worker: %v %v", q, err)
	}
	if _, err := worker.Client.CoordinationV1().Leases("allot-system").Get(ctx, multicluster.LeaseName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the manager's lease on the worker: %v", err)
	}
	if err := mgr.Client.BatchV1().Jobs("default").Delete(ctx, "train", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	worker.WaitFor(t, "the copy gone from w1", func() (bool, string) {
		l, err := worker.Client.BatchV1().Jobs("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0 || l.Items[0].DeletionTimestamp != nil, fmt.Sprintf("%d jobs", len(l.Items))
	})
	// A researcher with edit in their namespace can neither say where their Job runs on the
	// manager nor pass a Job of theirs as a copy on the worker.
	ns := "team-a"
	tenant := kubetest.Tenant(t, ctx, mgr.Cluster.Config, ns, "alice")
	forged := job.DeepCopy()
	forged.Namespace, forged.ResourceVersion, forged.UID = ns, "", ""
	forged.Annotations = map[string]string{multicluster.AnnotationCluster: "w1"}
	if _, err := tenant.BatchV1().Jobs(ns).Create(ctx, forged, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), multicluster.AnnotationCluster) {
		t.Fatalf("a tenant's Job created with %s: %v", multicluster.AnnotationCluster, err)
	}
	forged.Annotations = nil
	made, err := tenant.BatchV1().Jobs(ns).Create(ctx, forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + multicluster.AnnotationCluster + `":"w1"}}}`)
	if _, err := tenant.BatchV1().Jobs(ns).Patch(ctx, made.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
		t.Fatalf("a tenant set %s on their Job", multicluster.AnnotationCluster)
	}
	wtenant := kubetest.Tenant(t, ctx, worker.Cluster.Config, ns, "alice")
	copyLike := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "not-a-copy", Labels: map[string]string{multicluster.LabelOrigin: string(made.UID)}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
	if _, err := wtenant.BatchV1().Jobs(ns).Create(ctx, copyLike, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), multicluster.LabelOrigin) {
		t.Fatalf("a tenant's Job on the worker labelled %s: %v", multicluster.LabelOrigin, err)
	}
	refused(t, worker, serviceAccount(worker, "allot-manager-access"),
		authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "allot-system"},
		authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods", Namespace: "default"},
		authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "allot-scheduler"})
	refused(t, mgr, serviceAccount(mgr, "allot"),
		authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"})
}

// TestHelmDispatchPoliciesAreTheManagers: the chart's policies on the dispatch annotations
// (a manager) and the origin label (a worker) are those the manager and the fence install
// where the chart does not, with the chart's ServiceAccounts as their writers.
func TestHelmDispatchPoliciesAreTheManagers(t *testing.T) {
	objs := deploy.Render(t, "--set", "multicluster.manager=true", "--set", "multicluster.worker=true")
	sa := "system:serviceaccount:allot-system:"
	dispatch, _ := multicluster.DispatchPolicy([]string{sa + "allot"})
	origin, _ := multicluster.OriginPolicy([]string{sa + "allot-manager-access", sa + "allot"})
	for _, want := range []*admissionregistrationv1.ValidatingAdmissionPolicy{dispatch, origin} {
		o := objs["ValidatingAdmissionPolicy/"+want.Name]
		if o == nil {
			t.Fatalf("the chart renders no policy %s", want.Name)
		}
		chart := as[admissionregistrationv1.ValidatingAdmissionPolicy](t, o)
		if a, b := string(deploy.MustJSON(t, chart.Spec)), string(deploy.MustJSON(t, want.Spec)); a != b {
			t.Errorf("the chart's %s differs from the manager's:\nchart:   %s\nmanager: %s", want.Name, a, b)
		}
		if objs["ValidatingAdmissionPolicyBinding/"+want.Name] == nil {
			t.Error("no binding for " + want.Name)
		}
	}
	if plain := deploy.Render(t); plain["ValidatingAdmissionPolicy/"+multicluster.DispatchPolicyName] != nil || plain["ServiceAccount/allot-manager-access"] != nil {
		t.Error("the chart renders multi-cluster objects without multicluster.manager or .worker")
	}
	// A worker installed outside the lease's namespace would have a fence that reads no
	// lease: the chart refuses it, naming the value.
	if out, err := deploy.Helm(t, "template", "allot", deploy.Chart, "--namespace", "gpu", "--set", "multicluster.worker=true"); err == nil ||
		!strings.Contains(out, "multicluster.leaseNamespace") {
		t.Errorf("a worker in namespace gpu with the lease in allot-system: %v\n%s", err, out)
	}
}
