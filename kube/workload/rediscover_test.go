package workload

import (
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
	"github.com/allot-dev/allot/kube/localcluster"
)

// TestKindInstalledLater: the controller starts on a cluster without KubeRay's CRD (allot
// up --with installs it after the stack has started; an operator may be installed any day).
// Once the CRD is served and the controller has asked again, a RayCluster gets its PodGroup.
func TestKindInstalledLater(t *testing.T) {
	e := kubetest.Start(t, 0, 0)
	c := New(e.Client, e.Dyn, e.Allot)
	clock := clocktesting.NewFakeClock(time.Now())
	c.clock = clock
	go c.Run(e.Ctx)
	// A Job's PodGroup says the controller has looked for the custom kinds (before it
	// watches Jobs): only then is KubeRay's CRD installed.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "default", Labels: map[string]string{v1alpha1.LabelQueue: "team-a"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	if _, err := e.Client.BatchV1().Jobs("default").Create(e.Ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the Job's PodGroup", func() (bool, string) {
		_, err := e.Allot.AllotV1alpha1().PodGroups("default").Get(e.Ctx, "first", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	ext := apiextensions.NewForConfigOrDie(e.Cluster.Config)
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: RayClusters.Resource + "." + RayClusters.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: RayClusters.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: RayClusters.Resource, Singular: "raycluster", Kind: "RayCluster", ListKind: "RayClusterList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: RayClusters.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(e.Ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.WaitEstablished(e.Ctx, ext, crd.Name); err != nil {
		t.Fatal(err)
	}
	allot := map[string]any{"spec": map[string]any{"schedulerName": v1alpha1.SchedulerName}}
	rc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": "tune", "namespace": "default", "labels": map[string]any{v1alpha1.LabelQueue: "team-a"}},
		"spec": map[string]any{"headGroupSpec": map[string]any{"template": allot},
			"workerGroupSpecs": []any{map[string]any{"groupName": "gpu", "replicas": int64(2), "template": allot}}},
	}}
	if _, err := e.Dyn.Resource(RayClusters).Namespace("default").Create(e.Ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, "the RayCluster's PodGroup of 3", func() (bool, string) {
		// Until the controller waits on its ticker, a step is lost: step at each look.
		clock.Step(Rediscover)
		pg, err := e.Allot.AllotV1alpha1().PodGroups("default").Get(e.Ctx, "tune", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pg.Spec.MinMember == 3, fmt.Sprintf("minMember %d", pg.Spec.MinMember)
	})
}
