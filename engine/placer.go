package engine

import "math/rand/v2"

// Placer places pods one at a time on a fixed set of nodes, immediately or never, with
// the engine's own placement code and no queues: the replay of a cluster trace.
type Placer struct {
	s     *session
	queue queueState
}

// NewPlacer starts with empty nodes.
func NewPlacer(nodes []Node, opts Options) *Placer {
	if opts.MaxNodeTrials <= 0 {
		opts.MaxNodeTrials = 64
	}
	p := &Placer{s: newSession(&Snapshot{Nodes: nodes}, opts)}
	p.s.frag = newFragModel(opts.Workload, nodes, opts.Placement == PlacementAllot)
	p.queue.q = &Queue{ID: "trace"}
	return p
}

// Place puts one pod on the cluster if it fits, reporting where.
func (p *Placer) Place(r PodRequest, gpuTypes []string) (Binding, bool) {
	job := &Job{ID: "pod", MinMember: 1, GPUTypes: gpuTypes, Pods: []Pod{{Request: r}}}
	js := &jobState{j: job, q: &p.queue, preemptible: true, choice: newDeviceChoice(job)}
	ps := &podState{p: &job.Pods[0], job: js}
	js.pods = []*podState{ps}
	if !p.s.placeOne(ps, nil) {
		return Binding{}, false
	}
	p.s.log = p.s.log[:0] // nothing here is ever rolled back
	return ps.binding(), true
}

// Allocated is the GPU capacity placed so far.
func (p *Placer) Allocated() MilliGPU { return MilliGPU(p.queue.alloc[ResourceGPU]) }

// Stranded is the free GPU capacity that no shape of the workload could use now: free
// devices and parts of devices on nodes where every shape is blocked by CPU, memory,
// model or size.
func (p *Placer) Stranded() MilliGPU {
	var out MilliGPU
	for _, n := range p.s.nodes {
		cpu, mem := n.n.CPU-n.cpuUsed, n.n.Memory-n.memUsed
		worst := freeMilli(n)
		for i := range p.s.frag.shapes {
			sh := &p.s.frag.shapes[i]
			if sh.Request.GPUs == 0 && !sh.Request.Shared() {
				continue
			}
			worst = min(worst, p.s.frag.unusable(n.n, n.gpuUsed, cpu, mem, sh))
		}
		out += worst
	}
	return out
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
