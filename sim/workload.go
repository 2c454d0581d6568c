package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/allot-dev/allot/engine"
)

// Team is one queue of a workload study.
type Team struct {
	Name  string  `yaml:"name" json:"name"`
	Quota float64 `yaml:"quota" json:"quota"` // GPUs
	// Share is the team's part of the arrivals (default: proportional to quota).
	Share float64 `yaml:"share" json:"share"`
}

// WorkloadOptions describe a long-running, multi-team study.
type WorkloadOptions struct {
	Nodes, GPUsPerNode int
	Teams              []Team
	Duration           time.Duration
	// Rate is job arrivals per hour across all teams (a Poisson process).
	Rate float64
	// Sizes maps GPUs per job to its weight in the mix.
	Sizes map[int]float64
	// Runtimes are sampled uniformly for job run times (the Philly distribution).
	Runtimes []time.Duration
	Seed     uint64
	// Sample is the interval of the utilisation series.
	Sample time.Duration
	// UsageStrength and HalfLife are the scheduler's history settings: with a strength
	// above 0 past use above quota tilts the division of idle GPUs (engine.Options).
	UsageStrength float64
	HalfLife      time.Duration
	// Spot, when set, makes some nodes spot capacity, taken back now and then
	// (workload_spot.go).
	Spot *SpotStudy
	// Workers, where set, runs each job of more than one GPU as that many workers of one
	// GPU each (data-parallel training): WorkersRigid a gang of all of them;
	// WorkersElastic an elastic job that starts with half of them (rounded up) and grows,
	// running slower in proportion while it has fewer (World.ElasticSpeed). Its run time
	// is at its full size. Unset, a job is one pod (a gang of whole nodes above a node).
	Workers  string
	Progress func(done, total int)
}

// The ways a workload study may run its jobs of more than one GPU (WorkloadOptions.Workers).
const (
	WorkersRigid   = "rigid"
	WorkersElastic = "elastic"
)

// TeamReport is what one team received.
type TeamReport struct {
	Team      string  `json:"team"`
	Quota     float64 `json:"quota"`
	Jobs      int     `json:"jobs"`
	Completed int     `json:"completed"`
	GPUHours  float64 `json:"gpuHours"`
	// FairShareHours integrates the share that quotas and weights give, history ignored,
	// so that runs with and without history are judged against the same yardstick.
	FairShareHours float64 `json:"fairShareGPUHours"`
	// Received is GPU-hours over fair-share GPU-hours: 1 means exactly the fair share.
	Received    float64 `json:"receivedOfFairShare"`
	WaitP50     string  `json:"waitP50"`
	WaitP95     string  `json:"waitP95"`
	Preemptions int     `json:"preemptions"`
}

// UtilPoint is the cluster's GPU allocation over one sample interval.
type UtilPoint struct {
	Hour        float64 `json:"hour"`
	Utilization float64 `json:"utilization"`
}

// WorkloadReport is the outcome of a study.
type WorkloadReport struct {
	GPUs        int          `json:"gpus"`
	Jobs        int          `json:"jobs"`
	Teams       []TeamReport `json:"teams"`
	Utilization []UtilPoint  `json:"utilization"`
	Mean        float64      `json:"meanUtilization"`
	// MeanDeviation and MaxDeviation are how far the teams ended from their fair-share
	// GPU-hours (|received − 1|), on average and at worst.
	MeanDeviation float64 `json:"meanDeviation"`
	MaxDeviation  float64 `json:"maxDeviation"`
	// UsageStrength and HalfLife echo the history settings of the run.
	UsageStrength float64 `json:"usageStrength"`
	HalfLife      string  `json:"halfLife,omitempty"`
	// Completion is how long the jobs that finished took, from submission to the end;
	// Cost is what the nodes cost while they were there (workload_spot.go).
	Completion Completion `json:"completion"`
	// Elastic and Grew are the jobs submitted elastic (Workers: elastic), and how many of
	// them were grown above their start.
	Elastic int          `json:"elastic,omitempty"`
	Grew    int          `json:"grew,omitempty"`
	Cost    *SpotOutcome `json:"spot,omitempty"`
}

// RunWorkload generates arrivals and plays them through the engine with the simulated clock.
func RunWorkload(ctx context.Context, o WorkloadOptions) (*WorkloadReport, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x3017))
	var nodes []engine.Node
	for i := 0; i < o.Nodes; i++ {
		n := engine.Node{ID: engine.NodeID(fmt.Sprintf("node-%d", i+1)), CPU: 128000, Memory: 1 << 40}
		for g := 0; g < o.GPUsPerNode; g++ {
			n.GPUs = append(n.GPUs, engine.GPU{Model: "GPU", Memory: 80 << 30, Island: g * 2 / max(o.GPUsPerNode, 1)})
		}
		nodes = append(nodes, n)
	}
	var queues []engine.Queue
	var shareSum float64
	for _, t := range o.Teams {
		q := engine.Queue{ID: engine.QueueID(t.Name)}
		q.Resources[engine.ResourceGPU].Quota = int64(math.Round(t.Quota * 1000))
		queues = append(queues, q)
		shareSum += t.teamShare()
	}
	w := NewWorld(engine.New(engine.Options{Seed: o.Seed, UsageStrength: o.UsageStrength}), nodes, queues)
	w.ElasticSpeed = true
	if o.UsageStrength > 0 {
		w.KeepHistory(o.HalfLife, nil)
	}
	capacity := float64(o.Nodes * o.GPUsPerNode)
	// The spot nodes' interruptions from a stream of their own: the arrivals are the same
	// with spot nodes as without.
	spot := newSpotRun(o, w, rand.New(rand.NewPCG(o.Seed, 0x5907)))

	// Integrate allocation and fair share over time, piecewise constant between events.
	alloc := map[engine.QueueID]float64{}
	fair := map[engine.QueueID]float64{}
	gpuH := map[engine.QueueID]float64{}
	fairH := map[engine.QueueID]float64{}
	last := Epoch
	samples := make([]float64, int(o.Duration/o.Sample)+1)
	integrate := func(to time.Time) {
		for last.Before(to) {
			// Split at sample boundaries so each sample gets its own part.
			idx := int(last.Sub(Epoch) / o.Sample)
			end := Epoch.Add(time.Duration(idx+1) * o.Sample)
			if end.After(to) {
				end = to
			}
			h := end.Sub(last).Hours()
			var total float64
			for q, a := range alloc {
				gpuH[q] += a * h
				fairH[q] += fair[q] * h
				total += a
			}
			if idx < len(samples) {
				samples[idx] += total * h
			}
			last = end
		}
	}
	w.observe = func(now time.Time, p *engine.Plan) {
		integrate(now)
		for id, st := range p.Queues {
			alloc[id] = st.Allocated.GPU().GPUs()
			fair[id] = st.FairShare.GPU().GPUs()
		}
		if o.UsageStrength > 0 {
			for id, r := range engine.FairShares(w.Snapshot()) {
				fair[id] = r.GPU().GPUs()
			}
		}
	}

	sizes := make([]int, 0, len(o.Sizes))
	for s := range o.Sizes {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	pickSize := func() int {
		var total float64
		for _, s := range sizes {
			total += o.Sizes[s]
		}
		x := rng.Float64() * total
		for _, s := range sizes {
			if x -= o.Sizes[s]; x < 0 {
				return s
			}
		}
		return sizes[len(sizes)-1]
	}
	pickTeam := func() Team {
		x := rng.Float64() * shareSum
		for _, t := range o.Teams {
			if x -= t.teamShare(); x < 0 {
				return t
			}
		}
		return o.Teams[len(o.Teams)-1]
	}

	end := Epoch.Add(o.Duration)
	at := Epoch
	jobs := 0
	submitted := map[engine.JobID]string{}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		at = at.Add(time.Duration(rng.ExpFloat64() / o.Rate * float64(time.Hour)))
		if at.After(end) {
			break
		}
		if err := spot.until(at); err != nil {
			return nil, err
		}
		if err := w.Advance(at.Sub(w.now)); err != nil {
			return nil, err
		}
		t := pickTeam()
		size := pickSize()
		jobs++
		id := engine.JobID(fmt.Sprintf("%s-%d", t.Name, jobs))
		req := engine.PodRequest{CPU: 4000, Memory: 32 << 30}
		pods := 1
		if size < o.GPUsPerNode || o.GPUsPerNode == 0 {
			req.GPUs = size
		} else {
			// Jobs larger than a node are gangs of whole nodes.
			req.GPUs = o.GPUsPerNode
			pods = size / o.GPUsPerNode
		}
		least := pods
		if o.Workers != "" && size > 1 {
			req.GPUs, pods, least = 1, size, size
			if o.Workers == WorkersElastic {
				least = (size + 1) / 2
			}
		}
		job := engine.Job{ID: id, Queue: engine.QueueID(t.Name), MinMember: least}
		spot.policy(&job)
		for p := 0; p < least; p++ {
			job.Pods = append(job.Pods, engine.Pod{ID: engine.PodID(fmt.Sprintf("%s-%d", id, p)), Request: req})
		}
		if least < pods {
			job.Growth = &engine.Growth{Max: pods - least, Pod: req}
		}
		run := o.Runtimes[rng.IntN(len(o.Runtimes))]
		w.Submit(job, max(run, time.Second))
		submitted[id] = t.Name
		if err := w.Settle(); err != nil {
			return nil, err
		}
		if o.Progress != nil {
			o.Progress(int(w.now.Sub(Epoch)/time.Minute), int(o.Duration/time.Minute))
		}
	}
	if err := spot.until(end); err != nil {
		return nil, err
	}
	if err := w.Advance(end.Sub(w.now)); err != nil {
		return nil, err
	}
	integrate(end)

	rep := &WorkloadReport{GPUs: int(capacity), Jobs: jobs, UsageStrength: o.UsageStrength, Completion: completion(w), Cost: spot.outcome(end)}
	for _, j := range w.jobs {
		if j.job.Growth != nil {
			rep.Elastic++
			if j.grew {
				rep.Grew++
			}
		}
	}
	if o.UsageStrength > 0 {
		rep.HalfLife = o.HalfLife.String()
	}
	for _, t := range o.Teams {
		id := engine.QueueID(t.Name)
		tr := TeamReport{Team: t.Name, Quota: t.Quota, GPUHours: gpuH[id], FairShareHours: fairH[id]}
		if tr.FairShareHours > 0 {
			tr.Received = tr.GPUHours / tr.FairShareHours
		}
		var waits []time.Duration
		for _, j := range w.jobs {
			if j.job.Queue != id {
				continue
			}
			tr.Jobs++
			tr.Preemptions += j.preemptions
			if j.status == StatusCompleted {
				tr.Completed++
			}
			start := j.firstStart
			if start.IsZero() {
				start = end // still waiting: at least this long
			}
			waits = append(waits, start.Sub(j.job.SubmitTime))
		}
		tr.WaitP50, tr.WaitP95 = percentile(waits, 0.5), percentile(waits, 0.95)
		rep.Teams = append(rep.Teams, tr)
		dev := math.Abs(tr.Received - 1)
		rep.MeanDeviation += dev / float64(len(o.Teams))
		rep.MaxDeviation = max(rep.MaxDeviation, dev)
	}
	var total float64
	for i, s := range samples {
		span := o.Sample
		if rest := o.Duration - time.Duration(i)*o.Sample; rest < span {
			span = rest
		}
		if span <= 0 {
			continue
		}
		u := s / (capacity * span.Hours())
		rep.Utilization = append(rep.Utilization, UtilPoint{Hour: (time.Duration(i) * o.Sample).Hours(), Utilization: u})
		total += s
	}
	rep.Mean = total / (capacity * o.Duration.Hours())
	return rep, nil
}

func (t Team) teamShare() float64 {
	if t.Share > 0 {
		return t.Share
	}
	return max(t.Quota, 0.001)
}

func percentile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	d := ds[min(int(q*float64(len(ds))), len(ds)-1)]
	return d.Round(time.Minute).String()
}

func (o *WorkloadOptions) validate() error {
	switch {
	case o.Nodes < 1 || o.GPUsPerNode < 1:
		return fmt.Errorf("--nodes and --gpus-per-node must be at least 1")
	case len(o.Teams) == 0:
		return fmt.Errorf("--teams: at least one team, such as a:4,b:2")
	case o.Duration <= 0:
		return fmt.Errorf("--days must be more than 0")
	case o.Rate <= 0:
		return fmt.Errorf("--rate must be more than 0 jobs per hour")
	case len(o.Runtimes) == 0:
		return fmt.Errorf("no run times: give --runtimes, a CSV with a runtime column in seconds")
	case len(o.Sizes) == 0:
		return fmt.Errorf("--sizes: at least one job size")
	}
	if o.Sample <= 0 {
		o.Sample = 6 * time.Hour
	}
	if err := engine.CheckUsageStrength(o.UsageStrength); err != nil {
		return fmt.Errorf("--usage-strength %w", err)
	}
	if o.Spot != nil {
		if err := o.Spot.validate(o.Nodes); err != nil {
			return err
		}
	}
	if o.UsageStrength > 0 && o.HalfLife <= 0 {
		return fmt.Errorf("--usage-half-life must be more than 0, such as 24h")
	}
	if o.Workers != "" && o.Workers != WorkersRigid && o.Workers != WorkersElastic {
		return fmt.Errorf("workers: %q is not allowed; allowed: %s or %s", o.Workers, WorkersRigid, WorkersElastic)
	}
	for s, wgt := range o.Sizes {
		if s < 1 || wgt < 0 || (s > o.GPUsPerNode && s%o.GPUsPerNode != 0) || s > o.Nodes*o.GPUsPerNode {
			return fmt.Errorf("--sizes: %d GPUs is not allowed: sizes fit a node (≤ %d) or are whole nodes within the cluster, weights ≥ 0", s, o.GPUsPerNode)
		}
	}
	seen := map[string]bool{}
	for _, t := range o.Teams {
		if t.Name == "" || seen[t.Name] || t.Quota < 0 {
			return fmt.Errorf("--teams: %q is not allowed: teams have unique names and quotas of 0 or more", t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}
