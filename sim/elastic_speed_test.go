package sim

import (
	"context"
	"testing"
	"time"

	"github.com/allot-dev/allot/engine"
)

// An elastic job runs at the speed of its members over its full size (World.ElasticSpeed):
//
//	node-1 (4 GPUs)   q (quota 4): rigid, 2 GPUs for 30m
//	                               el, 1-GPU workers, 2 of up to 4, 1h at 4
//
// el starts with its 2 beside rigid, at half speed: 15m of its work in the first 30m. rigid
// ends; el grows to 4 and does the other 45m at full speed: it ends at 1h15m, not at 1h.
// Without ElasticSpeed it ends at 1h, its duration from its start.
func TestElasticJobRunsAtTheSpeedOfItsMembers(t *testing.T) {
	for _, c := range []struct {
		speed bool
		want  time.Duration
	}{{true, 75 * time.Minute}, {false, time.Hour}} {
		n := engine.Node{ID: "node-1", CPU: 64000, Memory: 1 << 40}
		for range 4 {
			n.GPUs = append(n.GPUs, engine.GPU{Model: "GPU", Memory: 80 << 30})
		}
		q := engine.Queue{ID: "q"}
		q.Resources[engine.ResourceGPU].Quota = 4000
		w := NewWorld(engine.New(engine.Options{}), []engine.Node{n}, []engine.Queue{q})
		w.ElasticSpeed = c.speed
		one := engine.PodRequest{GPUs: 1, CPU: 1000, Memory: 1 << 30}
		w.Submit(engine.Job{ID: "rigid", Queue: "q", MinMember: 1, Pods: []engine.Pod{{ID: "rigid-0", Request: engine.PodRequest{GPUs: 2, CPU: 1000, Memory: 1 << 30}}}}, 30*time.Minute)
		w.Submit(engine.Job{ID: "el", Queue: "q", MinMember: 2, Pods: []engine.Pod{{ID: "el-0", Request: one}, {ID: "el-1", Request: one}},
			Growth: &engine.Growth{Max: 2, Pod: one}}, time.Hour)
		if err := w.Settle(); err != nil {
			t.Fatal(err)
		}
		if err := w.Advance(3 * time.Hour); err != nil {
			t.Fatal(err)
		}
		el := w.byID["el"]
		if got := el.completed.Sub(Epoch); el.status != StatusCompleted || got != c.want {
			t.Errorf("ElasticSpeed %v: el %s after %s, want completed after %s (events %v)", c.speed, el.status, got, c.want, w.events)
		}
		if len(el.job.Pods) != 4 {
			t.Errorf("ElasticSpeed %v: el ended with %d members, want grown to 4", c.speed, len(el.job.Pods))
		}
	}
}

// The study's two ways of running jobs of several GPUs, on the same arrivals: as rigid
// gangs of one-GPU workers none is elastic; as elastic workers each such job is submitted
// with half its workers and a growth, and some are grown. Which way completes sooner
// depends on the load (docs/simulation.md); the test holds the mechanism, not a verdict.
func TestElasticWorkersStudy(t *testing.T) {
	o := studyOptions()
	o.Sizes = map[int]float64{1: 2, 2: 1, 4: 1, 8: 1}
	o.Duration, o.Rate = 2*24*time.Hour, 2
	reps := map[string]*WorkloadReport{}
	for _, workers := range []string{WorkersRigid, WorkersElastic} {
		o.Workers = workers
		rep, err := RunWorkload(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		reps[workers] = rep
		t.Logf("%s: %d jobs, %d done, completion p50 %s, p95 %s, mean %s; %d elastic, %d grew", workers, rep.Jobs, rep.Completion.Done,
			rep.Completion.P50, rep.Completion.P95, rep.Completion.Mean, rep.Elastic, rep.Grew)
	}
	rigid, elastic := reps[WorkersRigid], reps[WorkersElastic]
	if rigid.Elastic != 0 || rigid.Jobs != elastic.Jobs {
		t.Errorf("rigid: %d of %d jobs elastic; elastic run: %d jobs; want none, and the same arrivals", rigid.Elastic, rigid.Jobs, elastic.Jobs)
	}
	// Sizes 2, 4 and 8 are three fifths of the mix.
	if elastic.Elastic < elastic.Jobs/3 || elastic.Grew == 0 || elastic.Grew > elastic.Elastic {
		t.Errorf("elastic run: %d of %d jobs elastic, %d grew; want about three fifths elastic, some grown", elastic.Elastic, elastic.Jobs, elastic.Grew)
	}
	o.Workers = "sometimes"
	if _, err := RunWorkload(context.Background(), o); err == nil || err.Error() != `workers: "sometimes" is not allowed; allowed: rigid or elastic` {
		t.Errorf(`workers "sometimes": %v`, err)
	}
}
