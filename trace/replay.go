package trace

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/allot-dev/allot/engine"
)

// ReplayOptions are the knobs of the published protocol and of the run.
type ReplayOptions struct {
	Policies []engine.Placement
	Seeds    []uint64
	// Tune is the arrived demand to reach, as a multiple of GPU capacity (1.3 in the paper).
	Tune float64
	// Workers run (policy, seed) pairs in parallel; results do not depend on it.
	Workers int
	// Progress, if set, is called after each finished run.
	Progress func(done, total int)
	// AsIs replays the pod list once in its own order, neither resampled to Tune nor
	// shuffled, so that another simulator's run on the same file can be compared pod for
	// pod. The seed then only seeds the placement's own tie-breaking.
	AsIs bool
}

// Point is the allocation ratio when a given demand had arrived, both as fractions of
// GPU capacity.
type Point struct {
	Arrived   float64 `json:"arrived"`
	Allocated float64 `json:"allocated"`
}

// Run is one replay of one policy with one seed.
type Run struct {
	Policy string  `json:"policy"`
	Seed   uint64  `json:"seed"`
	Pods   int     `json:"pods"`
	Placed int     `json:"placed"`
	At100  float64 `json:"allocAt100"`
	AtEnd  float64 `json:"allocAtEnd"`
	// Stranded is the free GPU capacity no pod shape of the workload could use at the end.
	Stranded float64 `json:"strandedAtEnd"`
	Curve    []Point `json:"curve"`
}

// Replay runs every policy with every seed on the pods, following the protocol: the GPU
// nodes only, demand tuned to Tune × capacity, a seeded shuffle, one pod at a time placed
// immediately or never, no departures, no migration.
func Replay(ctx context.Context, nodes []engine.Node, pods []Pod, opts ReplayOptions) ([]Run, error) {
	if len(nodes) == 0 || len(pods) == 0 {
		return nil, fmt.Errorf("replay needs nodes and pods")
	}
	shapes := Shapes(pods)
	type task struct{ i, p, s int }
	total := len(opts.Policies) * len(opts.Seeds)
	runs := make([]Run, total)
	tasks := make(chan task)
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range tasks {
				runs[t.i] = replayOne(nodes, pods, shapes, opts.Policies[t.p], opts.Seeds[t.s], opts.Tune, opts.AsIs)
				mu.Lock()
				done++
				if opts.Progress != nil {
					opts.Progress(done, total)
				}
				mu.Unlock()
			}
		}()
	}
	var err error
feed:
	for p := range opts.Policies {
		for s := range opts.Seeds {
			select {
			case tasks <- task{p*len(opts.Seeds) + s, p, s}:
			case <-ctx.Done():
				err = ctx.Err()
				break feed
			}
		}
	}
	close(tasks)
	wg.Wait()
	return runs, err
}

// Shapes is the workload's mix of pod shapes, weighted by frequency.
func Shapes(pods []Pod) []engine.Shape {
	idx := map[string]int{}
	var out []engine.Shape
	for _, p := range pods {
		k := fmt.Sprint(p.Request(), p.GPUTypes)
		if i, ok := idx[k]; ok {
			out[i].Weight++
			continue
		}
		idx[k] = len(out)
		out = append(out, engine.Shape{Request: p.Request(), GPUTypes: p.GPUTypes, Weight: 1})
	}
	return out
}

func replayOne(nodes []engine.Node, pods []Pod, shapes []engine.Shape, policy engine.Placement, seed uint64, tune float64, asIs bool) Run {
	capacity := Capacity(nodes)
	list := pods
	if !asIs {
		rng := NewRand(seed)
		target := engine.MilliGPU(math.Round(float64(capacity) * tune))
		list = Tune(pods, target, rng)
		Shuffle(list, rng)
	}
	placer := engine.NewPlacer(nodes, engine.Options{Placement: policy, Seed: seed, Workload: shapes})
	run := Run{Policy: PolicyLabel(policy), Seed: seed, Pods: len(list)}
	var arrived, alloc engine.MilliGPU
	step := capacity / 100 // one curve point per 1% of capacity arrived
	next := step
	at100 := false
	for _, p := range list {
		arrived += p.Demand()
		if _, ok := placer.Place(p.Request(), p.GPUTypes); ok {
			alloc += p.Demand()
			run.Placed++
		}
		for step > 0 && arrived >= next {
			run.Curve = append(run.Curve, Point{Arrived: float64(next) / float64(capacity), Allocated: float64(alloc) / float64(capacity)})
			next += step
		}
		if !at100 && arrived >= capacity {
			at100 = true
			run.At100 = float64(alloc) / float64(capacity)
		}
	}
	run.AtEnd = float64(alloc) / float64(capacity)
	run.Stranded = float64(placer.Stranded()) / float64(capacity)
	return run
}

// PolicyLabel names a policy in reports; the engine's default says so.
func PolicyLabel(p engine.Placement) string {
	if p == engine.PlacementAllot {
		return "allot (default)"
	}
	return p.String()
}
