package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/allot-dev/allot/engine"
)

// StepReport is the state after one step, the unit of `allot sim -o json`.
type StepReport struct {
	Step   string                 `json:"step"`
	Time   string                 `json:"time"`
	Cycles int                    `json:"cycles"`
	Jobs   map[string]JobReport   `json:"jobs"`
	Queues map[string]QueueReport `json:"queues"`
	Events []string               `json:"events,omitempty"`
}

type JobReport struct {
	Queue  string      `json:"queue"`
	Status string      `json:"status"`
	GPUs   float64     `json:"gpus"`
	Pods   []PodReport `json:"pods"`
	Reason string      `json:"reason,omitempty"`
}

type PodReport struct {
	Node string `json:"node"`
	GPUs []int  `json:"gpus"`
	// Share is the part of the GPU a shared pod holds; omitted for whole GPUs.
	Share float64 `json:"share,omitempty"`
	// MIG is the profile of the pod's MIG instances, MIGStarts their first memory slices.
	MIG       string `json:"mig,omitempty"`
	MIGStarts []int  `json:"migStarts,omitempty"`
}

type QueueReport struct {
	Parent    string  `json:"parent,omitempty"`
	Quota     float64 `json:"quota"`
	FairShare float64 `json:"fairShare"`
	Allocated float64 `json:"allocated"`
	Pending   int     `json:"pending"`
	// Usage is the decayed GPU-hours above quota, with history on.
	Usage float64 `json:"usageGPUHours,omitempty"`
	// Accelerators is the same of each kind of other vendors' devices the cluster has.
	Accelerators map[string]KindReport `json:"accelerators,omitempty"`
	// Pools is the same of each node pool divided apart.
	Pools map[string]KindReport `json:"pools,omitempty"`
}

// KindReport is a queue's quota, fair share and allocation of one kind of accelerator.
type KindReport struct {
	Quota     float64 `json:"quota"`
	FairShare float64 `json:"fairShare"`
	Allocated float64 `json:"allocated"`
}

// Report describes the world now.
func (w *World) Report(name string) StepReport {
	r := StepReport{Step: name, Time: w.now.Sub(Epoch).String(), Cycles: w.cycles,
		Jobs: map[string]JobReport{}, Queues: map[string]QueueReport{}, Events: w.events}
	w.events, w.cycles = nil, 0
	for _, j := range w.jobs {
		jr := JobReport{Queue: string(j.job.Queue), Status: j.status, Reason: j.reason, Pods: []PodReport{}}
		var gpus engine.MilliGPU
		for _, p := range j.job.Pods {
			b := p.Binding
			if b == nil {
				continue
			}
			pr := PodReport{Node: string(b.Node), GPUs: b.GPUs, MIG: b.MIG, MIGStarts: b.MIGStarts}
			if b.Share > 0 {
				pr.Share = b.Share.GPUs()
				gpus += b.Share
			} else {
				gpus += engine.MilliGPU(len(b.GPUs)) * engine.OneGPU
			}
			jr.Pods = append(jr.Pods, pr)
		}
		jr.GPUs = gpus.GPUs()
		r.Jobs[string(j.job.ID)] = jr
	}
	for _, q := range w.queues {
		st := w.plan.Queues[q.ID]
		r.Queues[string(q.ID)] = QueueReport{Parent: string(q.Parent),
			Quota:     engine.MilliGPU(q.Resources[engine.ResourceGPU].Quota).GPUs(),
			FairShare: st.FairShare.GPU().GPUs(), Allocated: st.Allocated.GPU().GPUs(), Pending: st.Pending}
		if w.usage != nil {
			qr := r.Queues[string(q.ID)]
			qr.Usage = w.usage[q.ID].Decayed(w.now, w.halfLife) / 3600
			r.Queues[string(q.ID)] = qr
		}
		qr := r.Queues[string(q.ID)]
		qr.Accelerators = kindReports(w.accelerators, engine.AcceleratorResource, q, st)
		qr.Pools = kindReports(w.pools, engine.PoolResource, q, st)
		r.Queues[string(q.ID)] = qr
	}
	return r
}

// WriteJSON prints the reports as one JSON array.
func WriteJSON(out io.Writer, reports []StepReport) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(reports)
}

// WriteTable prints the reports for people: per step, the queues and the jobs.
func WriteTable(out io.Writer, reports []StepReport) error {
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "── step %s · t=%s · %d cycles\n", r.Step, r.Time, r.Cycles)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		history := false
		for _, q := range r.Queues {
			history = history || q.Usage > 0
		}
		fmt.Fprint(tw, "QUEUE\tPARENT\tQUOTA\tFAIR SHARE\tALLOCATED\tPENDING")
		if history {
			fmt.Fprint(tw, "\tUSAGE (GPU-H)")
		}
		fmt.Fprintln(tw)
		for _, name := range slices.Sorted(maps.Keys(r.Queues)) {
			q := r.Queues[name]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d", name, dash(q.Parent), num(q.Quota), num(q.FairShare), num(q.Allocated), q.Pending)
			if history {
				fmt.Fprintf(tw, "\t%.0f", q.Usage)
			}
			fmt.Fprintln(tw)
			// Each other kind of accelerator on a line of its own, under the queue's GPUs.
			for _, kind := range slices.Sorted(maps.Keys(q.Accelerators)) {
				k := q.Accelerators[kind]
				fmt.Fprintf(tw, "  %s\t\t%s\t%s\t%s\t\n", kind, num(k.Quota), num(k.FairShare), num(k.Allocated))
			}
			// And each pool divided apart.
			for _, pool := range slices.Sorted(maps.Keys(q.Pools)) {
				k := q.Pools[pool]
				fmt.Fprintf(tw, "  pool %s\t\t%s\t%s\t%s\t\n", pool, num(k.Quota), num(k.FairShare), num(k.Allocated))
			}
		}
		tw.Flush()
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tQUEUE\tSTATUS\tGPUS\tPLACEMENT\tREASON")
		for _, name := range slices.Sorted(maps.Keys(r.Jobs)) {
			j := r.Jobs[name]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, j.Queue, j.Status, num(j.GPUs), placement(j.Pods), j.Reason)
		}
		tw.Flush()
		for _, e := range r.Events {
			fmt.Fprintf(out, "  • %s\n", e)
		}
	}
	return nil
}

// placement renders pods as node[gpus], grouping pods on the same node: dgx-1[0,1] dgx-2[3].
func placement(pods []PodReport) string {
	if len(pods) == 0 {
		return "-"
	}
	byNode := map[string][]string{}
	var order []string
	for _, p := range pods {
		if _, ok := byNode[p.Node]; !ok {
			order = append(order, p.Node)
		}
		for i, g := range p.GPUs {
			s := fmt.Sprint(g)
			if p.MIG != "" && i < len(p.MIGStarts) {
				s += fmt.Sprintf(":%s@%d", p.MIG, p.MIGStarts[i])
			} else if p.Share > 0 {
				s += "@" + num(p.Share)
			}
			byNode[p.Node] = append(byNode[p.Node], s)
		}
	}
	parts := make([]string, 0, len(order))
	for _, n := range order {
		gs := byNode[n]
		slices.Sort(gs)
		parts = append(parts, n+"["+strings.Join(gs, ",")+"]")
	}
	return strings.Join(parts, " ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(fmt.Sprintf("%.3f", v), "0")
}

// kindReports are a queue's quota, fair share and allocation of each of the kinds named
// (accelerator kinds, or pools divided apart), kind i counted as resource res(i); nil
// where none is named.
func kindReports(names []string, res func(int) engine.Resource, q engine.Queue, st engine.QueueStatus) map[string]KindReport {
	if len(names) == 0 {
		return nil
	}
	out := make(map[string]KindReport, len(names))
	for i, name := range names {
		r := res(i)
		out[name] = KindReport{Quota: engine.MilliGPU(q.Resources[r].Quota).GPUs(),
			FairShare: engine.MilliGPU(st.FairShare[r]).GPUs(), Allocated: engine.MilliGPU(st.Allocated[r]).GPUs()}
	}
	return out
}
