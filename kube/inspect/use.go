package inspect

import (
	"context"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
)

// GPUUse is what a workload's GPUs were last measured doing, by the agents of their nodes.
type GPUUse struct {
	// Utilization is the mean busy percentage of the whole GPUs its running pods hold; nil
	// where it holds none measured (a slice's GPU is busy for all its sharers together).
	Utilization *int `json:"utilization,omitempty"`
	// MemoryUsedMi is the GPU memory it holds: all of its whole GPUs' used memory, and what
	// each of its slices' pods was measured to hold; nil where none was read.
	MemoryUsedMi *int64 `json:"memoryUsedMi,omitempty"`
	// GPUs is how many whole GPUs the utilisation is the mean of.
	GPUs int `json:"gpus"`
}

// withUse gives each workload the GPU use its nodes' agents last reported (their Leases,
// or the Node where no agent reports: WithLoad). A user who may not read the nodes, or the
// agents' Leases, sees what is readable, or nothing.
func withUse(ctx context.Context, client kubernetes.Interface, nodes []*corev1.Node, ws []Workload) {
	if len(nodes) == 0 {
		return
	}
	var leases []*coordinationv1.Lease
	if l, err := client.CoordinationV1().Leases(v1alpha1.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelAgentLease}); err == nil {
		leases = ptrs(l.Items)
	}
	WorkloadUse(WithLoad(nodes, leases), ws)
}

// WorkloadUse gives each workload the GPU use written on its nodes (nodes as WithLoad
// returns them: the agents' last reports on the Node objects).
func WorkloadUse(nodes []*corev1.Node, ws []Workload) {
	type load struct {
		util  []*int // as allot top nodes reads it (nodes.go)
		memMi []string
	}
	byNode := map[string]load{}
	for _, n := range nodes {
		u, m := n.Annotations[v1alpha1.AnnotationGPUUtilization], n.Annotations[v1alpha1.AnnotationGPUMemoryUsed]
		if u != "" || m != "" {
			byNode[n.Name] = load{utilization(u, len(split(u))), split(m)}
		}
	}
	for i := range ws {
		var use GPUUse
		busy, read := 0, false
		addMemory := func(mi int64) {
			if use.MemoryUsedMi == nil {
				use.MemoryUsedMi = new(int64)
			}
			*use.MemoryUsedMi += mi
			read = true
		}
		for _, p := range ws[i].Pods {
			l, ok := byNode[p.Node]
			if !ok || p.Phase != string(corev1.PodRunning) {
				continue
			}
			if p.shared {
				if p.sliceUsedMi != nil {
					addMemory(*p.sliceUsedMi)
				}
				continue
			}
			for _, g := range p.devices {
				if g >= 0 && g < len(l.util) && l.util[g] != nil {
					busy += *l.util[g]
					use.GPUs++
					read = true
				}
				if v, ok := reading(l.memMi, g); ok {
					addMemory(int64(v))
				}
			}
		}
		if !read {
			continue
		}
		if use.GPUs > 0 {
			mean := (busy + use.GPUs/2) / use.GPUs
			use.Utilization = &mean
		}
		ws[i].Use = &use
	}
}

func split(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// reading is device g's used memory in MiB from the agent's report; false where it is not
// a reading.
func reading(fields []string, g int) (int, bool) {
	if g < 0 || g >= len(fields) {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(fields[g]))
	if err != nil || v < 0 || v > 1<<30 {
		return 0, false
	}
	return v, true
}
