// Package trace replays published cluster traces through the engine's placement: the
// Alibaba "openb" GPU-sharing trace (Weng et al., USENIX ATC'23) for fragmentation, and
// Philly run times for long-running fairness studies.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot-dev/allot/engine"
)

// Pod is one row of an openb pod list.
type Pod struct {
	Name     string
	CPU      int64 // millicores
	Memory   int64 // bytes
	GPUs     int   // num_gpu
	GPUMilli int64 // share of each GPU in thousandths
	GPUTypes []string
}

// Demand is the pod's GPU demand in MilliGPU: num_gpu × gpu_milli.
func (p Pod) Demand() engine.MilliGPU { return engine.MilliGPU(int64(p.GPUs) * p.GPUMilli) }

// Request is the pod as the engine sees it: whole GPUs, a fraction of one, or none.
func (p Pod) Request() engine.PodRequest {
	r := engine.PodRequest{CPU: p.CPU, Memory: p.Memory}
	switch {
	case p.GPUs == 1 && p.GPUMilli < 1000:
		r.GPUFraction = engine.MilliGPU(p.GPUMilli)
	case p.GPUs > 0:
		r.GPUs = p.GPUs
	}
	return r
}

// gpuMemory is the device memory of the trace's models; G1–G3 are undisclosed and get a
// common datacenter size. Trace pods request shares, not memory, so this only labels.
var gpuMemory = map[string]int64{"V100M16": 16 << 30, "V100M32": 32 << 30, "P100": 16 << 30, "T4": 16 << 30, "A10": 24 << 30}

// ReadNodes reads an openb node list (sn, cpu_milli, memory_mib, gpu, model).
func ReadNodes(path string) ([]engine.Node, error) {
	rows, err := readCSV(path, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"})
	if err != nil {
		return nil, err
	}
	var nodes []engine.Node
	for _, r := range rows {
		cpu, err1 := r.int("cpu_milli")
		mem, err2 := r.int("memory_mib")
		gpus, err3 := r.int("gpu")
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		if gpus > 64 {
			return nil, r.errorf("gpu", "%d GPUs on one node is more than the 64 supported", gpus)
		}
		if mem > maxMiB {
			return nil, r.errorf("memory_mib", "%d is not allowed: at most %d", mem, maxMiB)
		}
		model := r.get("model")
		n := engine.Node{ID: engine.NodeID(r.get("sn")), CPU: cpu, Memory: mem << 20}
		for g := 0; g < int(gpus); g++ {
			dev := gpuMemory[model]
			if dev == 0 {
				dev = 32 << 30
			}
			n.GPUs = append(n.GPUs, engine.GPU{Model: model, Memory: dev})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// ReadPods reads an openb pod list. The multigpu files carry only the first five columns.
func ReadPods(path string) ([]Pod, error) {
	rows, err := readCSV(path, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"})
	if err != nil {
		return nil, err
	}
	pods := make([]Pod, 0, len(rows))
	for _, r := range rows {
		cpu, err1 := r.int("cpu_milli")
		mem, err2 := r.int("memory_mib")
		gpus, err3 := r.int("num_gpu")
		milli, err4 := r.int("gpu_milli")
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, err
		}
		p := Pod{Name: r.get("name"), CPU: cpu, Memory: mem << 20, GPUs: int(gpus), GPUMilli: milli}
		switch {
		case mem > maxMiB:
			return nil, r.errorf("memory_mib", "%d is not allowed: at most %d", mem, maxMiB)
		case gpus > 64:
			return nil, r.errorf("num_gpu", "%d is not allowed: at most 64 GPUs on one pod", gpus)
		case milli > 1000:
			return nil, r.errorf("gpu_milli", "%d is not allowed: gpu_milli is between 0 and 1000", milli)
		case gpus > 1 && milli != 1000:
			return nil, r.errorf("gpu_milli", "%d is not allowed with num_gpu %d: only single-GPU pods take a fraction", milli, gpus)
		case gpus > 0 && milli == 0:
			return nil, r.errorf("gpu_milli", "0 is not allowed with num_gpu %d: a GPU pod takes 1 to 1000", gpus)
		}
		if spec := r.get("gpu_spec"); spec != "" {
			p.GPUTypes = strings.Split(spec, "|")
			slices.Sort(p.GPUTypes)
			p.GPUTypes = slices.Compact(p.GPUTypes)
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// row is one CSV record with its place in the file, for errors.
type row struct {
	path string
	line int
	cols map[string]int
	rec  []string
}

func (r row) get(col string) string {
	i, ok := r.cols[col]
	if !ok || i >= len(r.rec) {
		return ""
	}
	return strings.TrimSpace(r.rec[i])
}

func (r row) int(col string) (int64, error) {
	s := r.get(col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Some exports write integers as floats ("1000.0").
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f != float64(int64(f)) {
			return 0, r.errorf(col, "%q is not a whole number", s)
		}
		v = int64(f)
	}
	if v < 0 {
		return 0, r.errorf(col, "%d is not allowed: it must be 0 or more", v)
	}
	return v, nil
}

func (r row) errorf(col, format string, args ...any) error {
	return fmt.Errorf("%s:%d: column %s: %s", r.path, r.line, col, fmt.Sprintf(format, args...))
}

func readCSV(path string, required []string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	defer f.Close()
	return parseCSV(f, path, required)
}

// parseCSV reads rows from r; path only names the source in errors.
func parseCSV(r io.Reader, path string, required []string) ([]row, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s:1: reading the header: %w", path, err)
	}
	cols := map[string]int{}
	for i, h := range header {
		cols[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range required {
		if _, ok := cols[c]; !ok {
			return nil, fmt.Errorf("%s:1: the header lacks column %q; it needs %s", path, c, strings.Join(required, ", "))
		}
	}
	var rows []row
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			// encoding/csv's ParseError names the line and column; FieldPos is only
			// valid after a record was read.
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < len(required) {
			return nil, fmt.Errorf("%s:%d: %d columns, the header has %d", path, line, len(rec), len(header))
		}
		rows = append(rows, row{path: path, line: line, cols: cols, rec: rec})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no rows after the header", path)
	}
	return rows, nil
}

// maxRuntime bounds a run time: a longer one is an error in the file, and durations
// overflow near 292 years.
const maxRuntime = 365 * 24 * time.Hour

// maxMiB bounds memory columns, so that converting MiB to bytes cannot overflow.
const maxMiB = 1 << 40

// ReadRuntimes reads a CSV with a runtime column in seconds (the Philly run times).
func ReadRuntimes(path string) ([]time.Duration, error) {
	rows, err := readCSV(path, []string{"runtime"})
	if err != nil {
		return nil, err
	}
	return runtimes(rows)
}

// ParseRuntimes is ReadRuntimes from a reader; name only names the source in errors.
func ParseRuntimes(r io.Reader, name string) ([]time.Duration, error) {
	rows, err := parseCSV(r, name, []string{"runtime"})
	if err != nil {
		return nil, err
	}
	return runtimes(rows)
}

func runtimes(rows []row) ([]time.Duration, error) {
	out := make([]time.Duration, 0, len(rows))
	for _, r := range rows {
		v, err := strconv.ParseFloat(r.get("runtime"), 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, r.errorf("runtime", "%q is not a number of seconds (0 or more)", r.get("runtime"))
		}
		if v > maxRuntime.Seconds() {
			return nil, r.errorf("runtime", "%q is not allowed: at most %.0f seconds (a year)", r.get("runtime"), maxRuntime.Seconds())
		}
		out = append(out, time.Duration(v*float64(time.Second)))
	}
	return out, nil
}
