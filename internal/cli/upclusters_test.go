package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allot-dev/allot/kube/multicluster"
)

// TestUpClusters runs `allot up --demo --clusters 3` (a manager and two workers, three
// control planes in this process) and uses the manager's kubeconfig as a user would:
// team-a's H100 job lands on w2, the only cluster with H100s; team-b's three 8-GPU jobs
// use both workers (its quota of 16 spans them); allot clusters shows both ready; and one
// more job submitted with --multicluster waits on the manager, saying why for each worker.
func TestUpClusters(t *testing.T) {
	up := startUp(t, "--demo", "--clusters", "3")
	cfg, err := clientcmd.BuildConfigFromFlags("", up.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	where := func(name string) (string, int32, string) {
		j, err := client.BatchV1().Jobs("default").Get(up.ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", 0, err.Error()
		}
		return j.Annotations[multicluster.AnnotationCluster], j.Status.Active, j.Annotations[multicluster.AnnotationWaiting]
	}
	var last string
	err = wait.PollUntilContextTimeout(up.ctx, 300*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		used := map[string]bool{}
		c, active, why := where("h100-finetune")
		last = "h100-finetune: " + c + " " + why
		if c != "w2" || active != 1 {
			return false, nil
		}
		for _, n := range []string{"pretrain-0", "pretrain-1", "pretrain-2"} {
			c, active, why := where(n)
			last = n + ": " + c + " " + why
			if c == "" || active != 1 {
				return false, nil
			}
			used[c] = true
		}
		return used["w1"] && used["w2"], nil
	})
	if err != nil {
		t.Fatalf("the demo's jobs: %s\n%s", last, up.out.String())
	}
	// On the workers themselves (their own kubeconfigs): every pod of the four runs.
	for _, w := range []string{"w1", "w2"} {
		wc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(up.dataDir, w, "kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(up.ctx, 300*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			pods, err := kubernetes.NewForConfigOrDie(wc).CoreV1().Pods("default").List(up.ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			n, states := 0, []string{}
			for _, p := range pods.Items {
				states = append(states, p.Name+" "+string(p.Status.Phase)+" on "+p.Spec.NodeName)
				if p.Status.Phase == corev1.PodRunning {
					n++
				}
			}
			last = w + ": " + strings.Join(states, "; ")
			return n == len(pods.Items) && n > 0, nil
		})
		if err != nil {
			t.Fatalf("pods on %s: %s", w, last)
		}
	}
	out, err := runCLI(t, "clusters", "--kubeconfig", up.kubeconfig)
	if err != nil || !strings.Contains(out, "w1") || !strings.Contains(out, "w2") || strings.Count(out, "True") != 2 {
		t.Fatalf("allot clusters: %v\n%s", err, out)
	}
	t.Logf("allot clusters:\n%s", out)
	// allot list on the manager: where each runs, and only one worker's with --cluster.
	out, err = runCLI(t, "list", "--kubeconfig", up.kubeconfig)
	if err != nil || !strings.Contains(out, "CLUSTER") {
		t.Fatalf("allot list on the manager: %v\n%s", err, out)
	}
	shown := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 7 && f[0] == "h100-finetune" {
			shown = f[4] == "Running" && f[7] == "w2"
		}
	}
	if !shown {
		t.Errorf("allot list does not show h100-finetune running on w2:\n%s", out)
	}
	t.Logf("allot list:\n%s", out)
	out, err = runCLI(t, "list", "--worker", "w1", "--kubeconfig", up.kubeconfig)
	if err != nil || strings.Contains(out, "h100-finetune") || strings.Count(out, "pretrain-") != 2 {
		t.Fatalf("allot list --worker w1: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "submit", "big", "-p", "team-b", "-i", "pytorch/pytorch", "-g", "8", "--multicluster", "--kubeconfig", up.kubeconfig); err != nil {
		t.Fatalf("allot submit --multicluster: %v\n%s", err, out)
	}
	err = wait.PollUntilContextTimeout(up.ctx, 300*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		c, _, why := where("big")
		last = c + " " + why
		return c == "" && strings.Contains(why, "w1: ") && strings.Contains(why, "w2: "), nil
	})
	if err != nil {
		t.Fatalf("big, with every GPU of both workers in use: %s", last)
	}
	t.Logf("big waits: %s", last)
	out, err = runCLI(t, "describe", "big", "--kubeconfig", up.kubeconfig)
	if err != nil || !strings.Contains(out, "w1: ") || !strings.Contains(out, "Pending") {
		t.Fatalf("allot describe big: %v\n%s", err, out)
	}
}

// runCLI runs one allot command and returns what it printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewRoot()
	var out syncBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}
