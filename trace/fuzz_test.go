package trace

import (
	"os"
	"path/filepath"
	"testing"
)

// The trace readers take files anyone may hand them: whatever the bytes, they return
// rows that make sense or an error naming the file, line and column, and never panic.
// CI runs the seeds and a few seconds of each (make fuzz-short); `make fuzz` runs minutes.

func fuzzFile(t *testing.T, data []byte) string {
	p := filepath.Join(t.TempDir(), "f.csv")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// seed adds the first lines of a real trace file, and the garbage that once crashed.
func seed(f *testing.F, file string, lines int) {
	data, err := os.ReadFile(file)
	if err != nil {
		f.Fatal(err)
	}
	cut, n := 0, 0
	for i, b := range data {
		if b == '\n' {
			if n++; n == lines {
				cut = i + 1
				break
			}
		}
	}
	f.Add(data[:cut])
}

func FuzzReadNodes(f *testing.F) {
	seed(f, "../traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv", 6)
	f.Add([]byte("sn,cpu_milli,memory_mib,gpu,model\n\"0000000"))
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, err := ReadNodes(fuzzFile(t, data))
		if err != nil {
			return
		}
		for _, n := range nodes {
			if n.CPU < 0 || n.Memory < 0 || len(n.GPUs) > 64 {
				t.Fatalf("node %s read as cpu %d, memory %d, %d GPUs", n.ID, n.CPU, n.Memory, len(n.GPUs))
			}
		}
	})
}

func FuzzReadPods(f *testing.F) {
	seed(f, "../traces/alibaba-gpu-v2023/openb_pod_list_default.csv", 6)
	seed(f, "../traces/alibaba-gpu-v2023/openb_pod_list_gpuspec10.csv", 6)
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := ReadPods(fuzzFile(t, data))
		if err != nil {
			return
		}
		for _, p := range pods {
			if p.CPU < 0 || p.Memory < 0 || p.GPUs < 0 || p.GPUMilli < 0 || p.GPUMilli > 1000 || p.Demand() < 0 {
				t.Fatalf("pod %s read as %+v", p.Name, p)
			}
		}
	})
}

func FuzzReadRuntimes(f *testing.F) {
	seed(f, "../traces/philly_runtime.csv", 6)
	f.Add([]byte("runtime\n1e300\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rts, err := ReadRuntimes(fuzzFile(t, data))
		if err != nil {
			return
		}
		for _, d := range rts {
			if d < 0 {
				t.Fatalf("a run time read as %v", d)
			}
		}
	})
}
