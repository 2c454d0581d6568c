package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/api/v1alpha1"
	allotclient "github.com/allot-dev/allot/kube/client"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/localcluster"
	"github.com/allot-dev/allot/kube/multicluster"
	"github.com/allot-dev/allot/kube/scheduler"
	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/kube/stack"
	"github.com/allot-dev/allot/kube/submit"
)

// upClustersOptions are what allot up --clusters N runs: a manager and N-1 workers.
type upClustersOptions struct {
	clusters, nodes, gpus int
	gpuType               string
	memMi                 int64
	dataDir, kubeconfig   string
	demo                  bool
}

// workerModels are the GPU models of allot up's workers in turn: the first has
// --gpu-type's, the next H100s, so that a job naming a model has one place to go.
var workerModels = []struct {
	model string
	memMi int64
}{{"", 0}, {"H100-SXM5-80GB", 81920}, {"L40S", 46068}, {"A10G", 23028}}

// upClusters runs a manager and its workers, each an embedded control plane of its own in
// this process, until ctx ends: the workers with simulated GPU nodes and Allot's stack
// (with the fence), the manager with no nodes and the multi-cluster manager, each worker
// registered with it by a WorkerCluster and its kubeconfig's Secret.
func upClusters(ctx context.Context, out io.Writer, o upClustersOptions) error {
	names := []string{"manager"}
	for i := 1; i < o.clusters; i++ {
		names = append(names, "w"+strconv.Itoa(i))
	}
	configs := map[string]*rest.Config{}
	for _, n := range names {
		dir := filepath.Join(o.dataDir, n)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		fmt.Fprintf(out, "starting cluster %s in %s …\n", n, dir)
		c, err := localcluster.Start(ctx, dir)
		if err != nil {
			return fmt.Errorf("cluster %s: %w", n, err)
		}
		defer c.Stop()
		configs[n] = c.Config
		if n == "manager" {
			continue
		}
		if err := c.WriteKubeconfig(filepath.Join(dir, "kubeconfig")); err != nil {
			return err
		}
		client := kubernetes.NewForConfigOrDie(c.Config)
		model := workerModels[(len(configs)-2)%len(workerModels)]
		spec := simnode.Spec{Prefix: n + "-gpu", Count: o.nodes, GPUs: o.gpus, GPUType: o.gpuType, GPUMemoryMi: o.memMi, CPU: "128", Memory: "1Ti"}
		if model.model != "" {
			spec.GPUType, spec.GPUMemoryMi = model.model, model.memMi
		}
		if err := simnode.Create(ctx, client, spec); err != nil {
			return fmt.Errorf("cluster %s: %w", n, err)
		}
		go simnode.NewKubelet(client).Run(ctx)
		if _, err := stack.LocalWith(ctx, c.Config, c.Config, dir, "127.0.0.1:0", stack.Options{
			Scheduler: scheduler.Options{UsageIdleWhileAway: true}, FenceNamespace: "allot-system"}); err != nil {
			return fmt.Errorf("cluster %s: %w", n, err)
		}
		fmt.Fprintf(out, "  %s: %d nodes × %d %s GPUs, kubeconfig %s\n", n, o.nodes, o.gpus, spec.GPUType, filepath.Join(dir, "kubeconfig"))
	}
	mc := configs["manager"]
	kc, err := localcluster.Kubeconfig(mc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	client := kubernetes.NewForConfigOrDie(mc)
	allot := allotclient.NewForConfigOrDie(mc)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "allot-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, n := range names[1:] {
		kc, err := localcluster.Kubeconfig(configs[n])
		if err != nil {
			return err
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n + "-kubeconfig", Namespace: "allot-system"}, Data: map[string][]byte{"kubeconfig": kc}}
		if _, err := client.CoreV1().Secrets("allot-system").Create(ctx, s, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = client.CoreV1().Secrets("allot-system").Update(ctx, s, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		wc := &v1alpha1.WorkerCluster{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: v1alpha1.WorkerClusterSpec{
			KubeconfigSecret: v1alpha1.SecretKey{Namespace: "allot-system", Name: n + "-kubeconfig"}}}
		if _, err := allot.AllotV1alpha1().WorkerClusters().Create(ctx, wc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	running, err := stack.LocalWith(ctx, mc, mc, filepath.Join(o.dataDir, "manager"), "127.0.0.1:0", stack.Options{
		Manager: &multicluster.Options{}})
	if err != nil {
		return fmt.Errorf("the manager: %w", err)
	}
	if o.demo {
		if err := startClustersDemo(ctx, client, allot); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "Allot is up: a manager and %d worker clusters.\nkubeconfig: %s (the manager's)\n", len(names)-1, o.kubeconfig)
	fmt.Fprintf(out, "  allot clusters --kubeconfig %s\n      the workers, their GPUs and use\n", o.kubeconfig)
	fmt.Fprintf(out, "  kubectl --kubeconfig %s get jobs -o custom-columns='JOB:.metadata.name,CLUSTER:.metadata.annotations.allot\\.dev/cluster,ACTIVE:.status.active,WAITING:.metadata.annotations.allot\\.dev/waiting'\n      where each Job went, or why it waits\n", o.kubeconfig)
	fmt.Fprintf(out, "  allot submit big -p team-b -i pytorch/pytorch -g 8 --multicluster --kubeconfig %s\n      one more Job for the manager to place\nCtrl-C stops it.\n", o.kubeconfig)
	<-ctx.Done()
	fmt.Fprintln(out, "\nstopping …")
	return <-running.Done
}

// startClustersDemo makes the manager's queues and Jobs: team-a's job asks for H100s, which
// only the second worker has; team-b's quota of 16 is used on both workers.
func startClustersDemo(ctx context.Context, client kubernetes.Interface, allot versioned.Interface) error {
	for _, q := range []struct {
		name  string
		quota int32
	}{{"team-a", 8}, {"team-b", 16}} {
		queue := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: q.name}, Spec: v1alpha1.QueueSpec{GPU: v1alpha1.GPUQuota{Quota: q.quota}}}
		if _, err := allot.AllotV1alpha1().Queues().Create(ctx, queue, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("demo queue %s: %w", q.name, err)
		}
	}
	jobs := []submit.Spec{{Name: "h100-finetune", Queue: "team-a", GPUs: "8", GPUType: "H100-SXM5-80GB"}}
	for i := range 3 {
		jobs = append(jobs, submit.Spec{Name: "pretrain-" + strconv.Itoa(i), Queue: "team-b", GPUs: "8"})
	}
	for _, spec := range jobs {
		spec.Namespace, spec.Image, spec.Command, spec.ManagedBy = "default", "pytorch/pytorch", []string{"python", "train.py"}, multicluster.ManagedBy
		objs, err := spec.Objects()
		if err != nil {
			return err
		}
		for _, o := range objs {
			if j, ok := o.(*batchv1.Job); ok {
				if _, err := client.BatchV1().Jobs("default").Create(ctx, j, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("demo job: %w", err)
				}
			}
		}
	}
	return nil
}
