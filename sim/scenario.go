package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Scenario is a scenario file: a cluster, its queues, and steps that change it over time.
type Scenario struct {
	// Placement is the engine's placement strategy: binpack (default) or spread.
	Placement string `yaml:"placement"`
	// GPUPolicy chooses a node's GPUs apart from how nodes are chosen: binpack or spread.
	GPUPolicy string `yaml:"gpuPolicy"`
	// History, when set, lets past use above quota tilt the division of idle GPUs.
	History *HistorySpec `yaml:"fairShareHistory"`
	Cluster ClusterSpec  `yaml:"cluster"`
	// Topology lists levels of node labels, widest first, that jobs may require or prefer.
	Topology *TopologySpec `yaml:"topology"`
	Queues   []QueueSpec   `yaml:"queues"`
	Steps    []StepSpec    `yaml:"steps"`

	file  string
	lines map[string]int // field path → line, for errors
	model *compiled
}

// HistorySpec is the scheduler's --usage-strength and --usage-half-life.
type HistorySpec struct {
	Strength *float64 `yaml:"strength"`
	HalfLife string   `yaml:"halfLife"`
}

// TopologySpec is a cluster's Topology object: levels of node labels, widest first.
type TopologySpec struct {
	Levels []LevelSpec `yaml:"levels"`
}

// LevelSpec is one level: the node label and, optionally, what people call it.
type LevelSpec struct {
	Name      string `yaml:"name"`
	NodeLabel string `yaml:"nodeLabel"`
}

type ClusterSpec struct {
	Nodes []NodeSpec `yaml:"nodes"`
}

type NodeSpec struct {
	Name       string `yaml:"name"`
	NamePrefix string `yaml:"namePrefix"`
	Count      int    `yaml:"count"`
	GPUs       int    `yaml:"gpus"`
	GPUMemory  string `yaml:"gpuMemory"`
	GPUType    string `yaml:"gpuType"`
	// Islands splits the GPUs into this many NVLink/NUMA groups (default 1).
	Islands       int               `yaml:"islands"`
	CPU           string            `yaml:"cpu"`
	Memory        string            `yaml:"memory"`
	Labels        map[string]string `yaml:"labels"`
	Taints        []TaintSpec       `yaml:"taints"`
	Unschedulable bool              `yaml:"unschedulable"`
	// Spot marks capacity its cloud may take back with notice (an interrupt step does).
	Spot bool `yaml:"spot"`
	// DRA publishes the node's GPUs through DRA as NVIDIA's driver does; MIGGPUs of them
	// (the first) are in MIG mode, seven 1g.10gb devices each (sim/dra.go).
	DRA     bool `yaml:"dra"`
	MIGGPUs int  `yaml:"migGPUs"`
	// GPUMemories gives each GPU its own memory size, in index order (GPUs of different
	// sizes on one node); it overrides gpuMemory. Cordon lists the indices of GPUs an
	// admin took out of service. MaxSharers caps how many pods share one GPU.
	GPUMemories []string `yaml:"gpuMemories"`
	Cordon      []int    `yaml:"cordon"`
	MaxSharers  int      `yaml:"maxSharers"`
	// MIGLayout puts every GPU of the node in MIG mode with these instances (profiles,
	// "3g.40gb" or "3g.40gb@4" to name the first memory slice; without one, the first
	// start free), as the GPU Operator's MIG manager lays them out. MIGDynamic puts them
	// in MIG mode for the engine to lay out (with MIGLayout: the instances they start
	// with, idle). The GPU model (gpuType) must be one with MIG, as NVIDIA-A100-SXM4-80GB.
	MIGLayout  []string `yaml:"migLayout"`
	MIGDynamic bool     `yaml:"migDynamic"`
	// MIGStrategy "single" makes a fixed layout of one profile the NVIDIA device plugin's
	// single strategy: its instances are given as nvidia.com/gpu, to pods pinned to the
	// node's "<gpuType>-MIG-<profile>" product (a job's mig: <profile>), and a pod asking
	// whole GPUs is told so. Empty or "mixed": nvidia.com/mig-<profile> resources.
	MIGStrategy string `yaml:"migStrategy"`
	// Accelerator makes the node's devices (gpus of them) another vendor's, of this kind
	// ("ascend", "amd"): counted apart from NVIDIA GPUs, in the queues' accelerators.
	Accelerator string `yaml:"accelerator"`
}

type QueueSpec struct {
	Name                 string   `yaml:"name"`
	Parent               string   `yaml:"parent"`
	Quota                *float64 `yaml:"quota"`
	OverQuotaWeight      *float64 `yaml:"overQuotaWeight"`
	Limit                *float64 `yaml:"limit"`
	Priority             int32    `yaml:"priority"`
	InteractiveTimeLimit string   `yaml:"interactiveTimeLimit"`
	ReclaimMinRuntime    string   `yaml:"reclaimMinRuntime"`
	PreemptMinRuntime    string   `yaml:"preemptMinRuntime"`
	// Usage is the queue's past use above its quota at the start, in decayed GPU-hours.
	Usage  *float64 `yaml:"usage"`
	CPU    *ResSpec `yaml:"cpu"`
	Memory *ResSpec `yaml:"memory"`
	// Accelerators is the queue's quota of each kind of other vendors' devices, by kind:
	// {ascend: 8}.
	Accelerators map[string]float64 `yaml:"accelerators"`
	// BurstPolicy is what the queue's slices do when bursting pods hold the memory they
	// ask: evict (the default) or wait.
	BurstPolicy string `yaml:"burstPolicy"`
	// Pools gives the queue a quota of its own in node pools whose GPUs are divided apart
	// ({h100: {quota: 4}}): a pool any queue names here is divided on its own, and
	// quota, overQuotaWeight and limit above count the GPUs of the other pools.
	Pools map[string]PoolSpec `yaml:"pools"`
}

// PoolSpec is a queue's guarantee, over-quota weight and cap of one pool's GPUs.
type PoolSpec struct {
	Quota           float64  `yaml:"quota"`
	OverQuotaWeight *float64 `yaml:"overQuotaWeight"`
	Limit           *float64 `yaml:"limit"`
}

// ResSpec is a queue's CPU or memory quota, written as Kubernetes quantities.
type ResSpec struct {
	Quota           string   `yaml:"quota"`
	OverQuotaWeight *float64 `yaml:"overQuotaWeight"`
	Limit           string   `yaml:"limit"`
}

type StepSpec struct {
	Name   string    `yaml:"name"`
	Submit []JobSpec `yaml:"submit"`
	Delete []string  `yaml:"delete"`
	// Fail names pods (job-index, such as ddp-1) that stop on their own: crashed, or on a
	// node that failed. Their controller makes them again, pending.
	Fail []string `yaml:"fail"`
	// Interrupt names spot nodes their cloud takes back: nothing new is placed there, a
	// gang with pods there is stopped whole (to start again elsewhere), an elastic job
	// that keeps its minimum loses only the pods there.
	Interrupt []string `yaml:"interrupt"`
	Advance   string   `yaml:"advance"`
	// Use sets the GPU memory running pods are measured to use (pod → quantity), as the
	// node agent reads it: past a pod's request it is a burst.
	Use    map[string]string `yaml:"use"`
	Expect *Expect           `yaml:"expect"`
}

type JobSpec struct {
	Name      string   `yaml:"name"`
	Queue     string   `yaml:"queue"`
	Class     string   `yaml:"class"`
	GPU       *float64 `yaml:"gpu"`
	GPUMemory string   `yaml:"gpuMemory"`
	CPU       string   `yaml:"cpu"`
	Memory    string   `yaml:"memory"`
	Pods      *int     `yaml:"pods"`
	MinPods   *int     `yaml:"minPods"`
	// MaxPods makes the job's workload elastic through its own replica count: it is
	// submitted with pods, may be grown by the scheduler up to maxPods when GPUs free,
	// and is scaled down (its highest-indexed pods removed) rather than left waiting when
	// its members beyond minPods are taken back.
	MaxPods     *int   `yaml:"maxPods"`
	Priority    int32  `yaml:"priority"`
	Preemptible *bool  `yaml:"preemptible"`
	NodePool    string `yaml:"nodePool"`
	// NodePools are pools tried in order (the first, then the next) where nodePool names
	// one; never both.
	NodePools []string `yaml:"nodePools"`
	// Spot is which capacity the job may use: allowed (the default), never, or first
	// (spot only until onDemandAfter has passed since submission; without it, spot only).
	// Past interruptionBudget interruptions it runs on on-demand capacity only.
	Spot               string   `yaml:"spot"`
	OnDemandAfter      string   `yaml:"onDemandAfter"`
	InterruptionBudget *int     `yaml:"interruptionBudget"`
	GPUType            []string `yaml:"gpuType"`
	Duration           string   `yaml:"duration"`
	// NodeSelector, Tolerations and AntiAffinity are the pod spec's: the job's pods run
	// only on nodes whose labels match, tolerate the taints of the nodes they use, and
	// never share a node with a pod whose job labels match AntiAffinity (nor with a pod
	// whose anti-affinity matches their own Labels).
	NodeSelector map[string]string `yaml:"nodeSelector"`
	// TopologyRequired and TopologyPreferred name a level of the topology (by name or
	// node label): all pods within one domain of it, or as tightly packed as possible.
	TopologyRequired  string            `yaml:"topologyRequired"`
	TopologyPreferred string            `yaml:"topologyPreferred"`
	Tolerations       []TolerationSpec  `yaml:"tolerations"`
	Labels            map[string]string `yaml:"labels"`
	AntiAffinity      map[string]string `yaml:"antiAffinity"`
	// Claim asks for each pod's GPUs through a DRA ResourceClaim instead of gpu.
	Claim *ClaimSpec `yaml:"claim"`
	// GPUCompute is the percent of each GPU's compute a pod's slice takes (with gpuMemory,
	// or alone); GPUCount how many GPUs it takes its slice of.
	GPUCompute *float64 `yaml:"gpuCompute"`
	GPUCount   int      `yaml:"gpuCount"`
	// Device choice: only these GPUs (UUIDs, "GPU-sim-NODE-INDEX" in scenarios), never
	// these, never these models; gpuIsland: required keeps a pod on one island.
	GPUUUID        []string `yaml:"gpuUUID"`
	ExcludeGPUUUID []string `yaml:"excludeGPUUUID"`
	ExcludeGPUType []string `yaml:"excludeGPUType"`
	GPUIsland      string   `yaml:"gpuIsland"`
	// NodePolicy and GPUPolicy override how this job's nodes and GPUs are chosen.
	NodePolicy string `yaml:"nodePolicy"`
	GPUPolicy  string `yaml:"gpuPolicy"`
	// GPUMemoryLimit lets each pod's slice use GPU memory up to this much while it is free
	// (a dynamic fraction; with gpu or gpuMemory as the request).
	GPUMemoryLimit string `yaml:"gpuMemoryLimit"`
	// Accelerator asks gpu whole devices of this kind of other vendors' devices.
	Accelerator string `yaml:"accelerator"`
	// MIG asks each pod for a MIG instance of this profile ("1g.10gb"; gpuCount of them),
	// or, as "smallest", for the smallest profile holding its gpu fraction or gpuMemory.
	MIG string `yaml:"mig"`
}

// Expect states what must hold after a step; the simulator fails when it does not, which
// turns every scenario file into a test.
type Expect struct {
	Jobs   map[string]JobExpect   `yaml:"jobs"`
	Queues map[string]QueueExpect `yaml:"queues"`
	// Events must each appear in one of the step's events (evictions), in part.
	Events []string `yaml:"events"`
}

type JobExpect struct {
	Status string   `yaml:"status"`
	GPUs   *float64 `yaml:"gpus"`
	// Nodes lists the nodes the job's pods run on, in any order, without repeats.
	Nodes []string `yaml:"nodes"`
	// Reason must appear in the pending reason.
	Reason string `yaml:"reason"`
	// Placement must equal the rendered placement, such as "n1[0@0.6]" or "dgx-1[0,1]".
	Placement string `yaml:"placement"`
}

type QueueExpect struct {
	FairShare *float64 `yaml:"fairShare"`
	// Usage is the decayed GPU-hours above quota, to within 1%.
	Usage     *float64 `yaml:"usage"`
	Allocated *float64 `yaml:"allocated"`
	Pending   *int     `yaml:"pending"`
	// Accelerators holds the same of each kind of other vendors' devices, by kind.
	Accelerators map[string]KindExpect `yaml:"accelerators"`
	// Pools holds the same of each node pool divided apart, by pool.
	Pools map[string]KindExpect `yaml:"pools"`
}

// KindExpect is a queue's fair share and allocation of one kind of accelerator.
type KindExpect struct {
	FairShare *float64 `yaml:"fairShare"`
	Allocated *float64 `yaml:"allocated"`
}

// LoadFile reads and validates a scenario file.
func LoadFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scenario: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a scenario; errors name the file, the line and the field.
func Parse(file string, data []byte) (*Scenario, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty; it needs cluster, queues and steps", file)
	}
	sc := &Scenario{file: file, lines: map[string]int{}}
	if err := checkFields(file, root.Content[0], reflect.TypeOf(*sc), ""); err != nil {
		return nil, err
	}
	if err := root.Decode(sc); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%s: %s", file, strings.Join(te.Errors, "; "))
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	indexLines(root.Content[0], "", sc.lines)
	if err := sc.validate(); err != nil {
		return nil, err
	}
	return sc, nil
}

// indexLines records the line of every field path, like "steps[0].submit[1].gpu".
func indexLines(n *yaml.Node, path string, out map[string]int) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(path, n.Content[i].Value)
			out[p] = n.Content[i].Line
			indexLines(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			out[p] = c.Line
			indexLines(c, p, out)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkFields rejects keys the schema does not know, listing those it does.
func checkFields(file string, n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil // the decoder reports the type mismatch
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || !f.IsExported() {
				continue
			}
			fields[tag] = f.Type
			names = append(names, tag)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			ft, ok := fields[k.Value]
			if !ok {
				return fmt.Errorf("%s:%d: %s: unknown field %q; allowed fields: %s",
					file, k.Line, orTop(path), k.Value, strings.Join(names, ", "))
			}
			if err := checkFields(file, n.Content[i+1], ft, join(path, k.Value)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				if err := checkFields(file, c, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if err := checkFields(file, n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func orTop(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

// errorf makes a validation error located in the file: the field's line, else its nearest
// parent's.
func (sc *Scenario) errorf(path, format string, args ...any) error {
	line := sc.lines[path]
	for p := path; line == 0 && p != ""; {
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
		line = sc.lines[p]
	}
	return fmt.Errorf("%s:%d: %s: %s", sc.file, line, path, fmt.Sprintf(format, args...))
}
