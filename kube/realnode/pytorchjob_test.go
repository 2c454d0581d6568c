package realnode_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/internal/trainingop"
	"github.com/allot-dev/allot/kube/realnode"
)

var pytorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// The same elastic run as TestElasticTrainingOnTheRealNode's, as a PyTorchJob with an
// elasticPolicy, under Kubeflow's real training operator (v1.8.1, its own process):
//
//	real-1 (4 GPUs)   elastic-pt-a (quota 1): bert, a PyTorchJob of 1 to 2 workers, 1 GPU each
//	                  elastic-pt-b (quota 3): a gang of 3 × 1 GPU, comes and goes
//
// Allot reads the range from elasticPolicy (minReplicas its gang, maxReplicas how far it
// grows), and changes Worker.replicas: the operator makes worker 1 when it is raised and
// deletes it when it is lowered. The operator gives each worker torchrun's settings
// (PET_NNODES 1:2, the c10d rendezvous at elasticPolicy's host and port, its options), and
// torchrun forms the group again each time.
//
// Unlike the Job's, these workers are on the pods' network, each with its own address: the
// operator gives each worker's container its port (23456), which on the node's network
// would be a host port, one worker a node. Without cluster DNS, two things stand in for
// names: the rendezvous's store is served on the node's address (rdzvHost) rather than by
// worker 0 at its Service's name, and each agent names itself by its pod's address
// (testdata/elastic_launch.py).
func TestElasticPyTorchJobOnTheRealNode(t *testing.T) {
	needTorch(t)
	ctx := context.Background()
	const ns = "elastic-pt"
	work := trainingDir(t)
	const port = 29518
	serveStore(t, realnode.NodeAddress, port)
	log, err := os.Create(filepath.Join(t.TempDir(), "training-operator.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	op, err := trainingop.Start(ctx, cluster.Config, rigOpts.Kubeconfig, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Stop)
	defer func() {
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("the training operator's log ends:\n%s", tail(string(out), 40))
		}
	}()
	dyn := dynamic.NewForConfigOrDie(cluster.Config)
	elasticRun(t, ns, "bert", "training.kubeflow.org/job-name=bert,training.kubeflow.org/replica-type=worker", "training.kubeflow.org/replica-index", func() {
		job := pytorchJob(ns, "bert", ns+"-a", work, port)
		if _, err := dyn.Resource(pytorchJobs).Namespace(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			bg := metav1.DeletePropagationBackground
			_ = dyn.Resource(pytorchJobs).Namespace(ns).Delete(context.Background(), "bert", metav1.DeleteOptions{PropagationPolicy: &bg, GracePeriodSeconds: new(int64)})
		})
	})
	u, err := dyn.Resource(pytorchJobs).Namespace(ns).Get(ctx, "bert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas, _, _ := unstructured.NestedInt64(u.Object, "spec", "pytorchReplicaSpecs", "Worker", "replicas")
	if replicas != 2 {
		t.Errorf("bert's Worker.replicas is %d at the end, want 2 (grown back)", replicas)
	}
	for _, want := range []string{"Grew", "ScaledDown", "SuccessfulDeletePod"} {
		if !strings.Contains(events(ns, "bert"), want) {
			t.Errorf("bert has no %s Event: %s", want, events(ns, "bert"))
		}
	}
}

// serveStore serves torch's TCPStore, where torchrun's c10d rendezvous keeps its state, on
// the node at host:port until the test ends.
func serveStore(t *testing.T, host string, port int) {
	t.Helper()
	cmd := exec.Command(python, "-c", fmt.Sprintf(`import time, torch.distributed as d
s = d.TCPStore(%q, %d, is_master=True, wait_for_workers=False)
while True: time.sleep(3600)`, host, port))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("torch's store at %s: %v", addr, err)
	}
}

// pytorchJob is an elastic PyTorchJob of one to two workers, each on one GPU running
// torchrun on the training loop in work; the operator gives it the rendezvous (the store on
// the node's address, at port) and the range.
func pytorchJob(ns, name, queueName, work string, port int) *unstructured.Unstructured {
	var env []any
	for _, kv := range torchEnv() {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, map[string]any{"name": k, "value": v})
	}
	env = append(env, map[string]any{"name": "POD_IP", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "status.podIP"}}})
	var mounts, volumes []any
	for i, hp := range torchHostPaths(work) {
		parts := strings.Split(hp, ":")
		vol := fmt.Sprintf("host-%d", i)
		volumes = append(volumes, map[string]any{"name": vol, "hostPath": map[string]any{"path": parts[0]}})
		mounts = append(mounts, map[string]any{"name": vol, "mountPath": parts[1], "readOnly": len(parts) > 2 && parts[2] == "ro"})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{v1alpha1.LabelQueue: queueName}},
		"spec": map[string]any{
			// One process a worker: the operator's default, "auto", starts one per CPU.
			"nprocPerNode": "1",
			"elasticPolicy": map[string]any{"minReplicas": int64(1), "maxReplicas": int64(2), "rdzvBackend": "c10d",
				"rdzvHost": realnode.NodeAddress, "rdzvPort": int64(port), "maxRestarts": int64(20),
				// Every agent a client of the store; a group forms a second after its
				// minimum joins (not the default 30 s).
				"rdzvConf": []any{map[string]any{"key": "is_host", "value": "false"}, map[string]any{"key": "last_call_timeout", "value": "1"}}},
			"pytorchReplicaSpecs": map[string]any{"Worker": map[string]any{
				"replicas": int64(1), "restartPolicy": "OnFailure",
				"template": map[string]any{"spec": map[string]any{
					"schedulerName": v1alpha1.SchedulerName,
					"volumes":       volumes,
					"containers": []any{map[string]any{
						"name": "pytorch", "image": realnode.BusyboxImage, "imagePullPolicy": "Never",
						"command": []any{python, "/work/launch.py"}, "env": env, "volumeMounts": mounts,
						"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": int64(1)}},
					}},
				}},
			}},
		},
	}}
}
