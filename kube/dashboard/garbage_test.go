package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/kubetest"
)

// TestGarbageKeepsTheDashboardServing: objects garbled where many hands write (a node's
// GPU labels and annotations, pods' sharing and gang annotations written past the webhook,
// a PodGroup of two billion pods, two queues each the other's parent), on a real API
// server, and the dashboard goes on serving every page's data: the state with the garbled
// node trusted no further than its capacity, and each bad workload's detail.
func TestGarbageKeepsTheDashboardServing(t *testing.T) {
	e := kubetest.Start(t, 1, 4)
	e.Queue(t, "q", 4, nil)
	e.Queue(t, "loop-a", 1, map[string]any{"parent": "loop-b"})
	e.Queue(t, "loop-b", 1, map[string]any{"parent": "loop-a"})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]string{v1alpha1.LabelGPUMemory: "lots", v1alpha1.LabelGPUProduct: strings.Repeat("H", 60)},
		"annotations": map[string]string{
			v1alpha1.AnnotationGPUUUIDs:       ",,,,,,,,,,,,,,,,,,,,,,,",
			v1alpha1.AnnotationGPUUtilization: "999,-1,NaN,1e99,7",
			v1alpha1.AnnotationOccupancy:      `{"gpus":[{"index":99999999999,"holders":null}]}`,
		}}})
	if _, err := e.Client.CoreV1().Nodes().Patch(e.Ctx, "dgx-1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "allot.dev/v1alpha1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "huge", "namespace": "default"}, "spec": map[string]any{"minMember": int64(2147483647), "queue": "q"}}}
	if _, err := e.Dyn.Resource(kubetest.PodGroups).Namespace("default").Create(e.Ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []kubetest.PodSpec{
		{Name: "bad-share", Queue: "q", Annotations: map[string]string{v1alpha1.AnnotationGPUFraction: "banana", v1alpha1.AnnotationGPUs: "-1,x,99999999999999"}},
		{Name: "bad-min", Queue: "q", GPUs: 1, Labels: map[string]string{v1alpha1.LabelPodGroup: "huge"}, Annotations: map[string]string{v1alpha1.AnnotationMinMember: "lots"}},
		{Name: "in-loop", Queue: "loop-a", GPUs: 1},
	} {
		e.MustPod(t, s)
	}

	srv, err := New(e.Cluster.Config, Options{Settle: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	go func() { _ = srv.Run(ctx) }()
	web := httptest.NewServer(srv)
	defer web.Close()
	get := func(path string) (int, []byte) {
		resp, err := http.Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	var st State
	e.WaitFor(t, "the dashboard ready, with the three workloads and the node", func() (bool, string) {
		if code, _ := get("/healthz"); code != http.StatusOK {
			return false, fmt.Sprint("healthz ", code)
		}
		code, body := get("/api/state")
		if err := json.Unmarshal(body, &st); code != http.StatusOK || err != nil {
			return false, fmt.Sprint(code, err)
		}
		if len(st.Workloads) != 3 || len(st.Nodes) != 1 {
			return false, fmt.Sprintf("%d workloads, %d nodes", len(st.Workloads), len(st.Nodes))
		}
		if n := st.Nodes[0]; len(n.GPUs) != 4 || n.MemoryMi != 0 || st.Totals.GPUs != 4 {
			t.Fatalf("dgx-1 shown with %d GPUs of %d MiB, %v in total: not trusted past its capacity of 4", len(n.GPUs), n.MemoryMi, st.Totals.GPUs)
		}
		return true, ""
	})
	for _, w := range st.Workloads {
		if code, body := get("/api/workloads/" + w.Namespace + "/" + w.Name); code != http.StatusOK || !json.Valid(body) {
			t.Fatalf("detail of %s: %d %s", w.Name, code, body)
		}
	}
}
