package scheduler

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/allot-dev/allot/engine"
)

// TestUsageSurvivesRestartAndTiltsShares, on a real API server with a clock the test moves:
// a queue's decayed use above quota is written to its status, a new scheduler process
// continues from it (counting the time it was away at the rate the cluster runs), and the
// engine sees it: with strength 1 the queue that used everything gets none of the GPUs
// above quota once another queue of the same weight wants them.
//
//	n1 (×8): heavy ×8 (quota 0, weight 1)      light (quota 0, weight 1) arrives later
func TestUsageSurvivesRestartAndTiltsShares(t *testing.T) {
	e := newEnv(t, 1, 8)
	t0, now, set := movableClock()
	start := func() (stop func()) {
		return e.run(t, Options{Interval: 200 * time.Millisecond, Now: now, Engine: engine.Options{UsageStrength: 1}})
	}
	weight := map[string]any{"gpu": map[string]any{"quota": 0, "overQuotaWeight": 1}}
	e.Queue(t, "heavy", 0, weight)
	e.Queue(t, "light", 0, weight)
	for i := range 8 {
		e.pod(t, fmt.Sprintf("heavy-%d", i), "heavy", 1, nil)
	}
	usageOf := func(q string) (int64, bool) {
		u, err := e.dyn.Resource(queuesGVR).Get(e.ctx, q, metav1.GetOptions{})
		if err != nil {
			return 0, false
		}
		v, ok, _ := unstructured.NestedInt64(u.Object, "status", "usage", "gpuSeconds")
		return v, ok
	}
	near := func(got int64, want float64) bool { return math.Abs(float64(got)-want) <= 0.002*want+1 }
	halfLife := engine.DefaultUsageHalfLife

	stop := start()
	e.waitFor(t, "heavy's 8 pods running", func() (bool, string) {
		n := e.count(t, running)
		return n == 8, fmt.Sprintf("%d running", n)
	})
	e.waitFor(t, "usage counted from now", func() (bool, string) {
		_, ok := usageOf("heavy")
		return ok, "no status.usage yet"
	})
	set(2 * time.Hour)
	twoHours := engine.Usage{At: t0}.Accrue(t0.Add(2*time.Hour), 8, halfLife).GPUSeconds
	e.waitFor(t, "two hours of 8 GPUs above quota written", func() (bool, string) {
		v, _ := usageOf("heavy")
		return near(v, twoHours), fmt.Sprintf("heavy %d GPU-s, want %.0f", v, twoHours)
	})
	if v, _ := usageOf("light"); v != 0 {
		t.Fatalf("light, which ran nothing, has %d GPU-s", v)
	}
	stop()

	// A new process an hour later: it reads the two hours from the status and adds the
	// hour it was away (the pods kept running).
	set(3 * time.Hour)
	defer start()()
	threeHours := engine.Usage{GPUSeconds: twoHours, At: t0.Add(2 * time.Hour)}.Accrue(t0.Add(3*time.Hour), 8, halfLife).GPUSeconds
	set(3*time.Hour + time.Minute) // past usageWriteEvery, so the new value is written
	threeHours = engine.Usage{GPUSeconds: threeHours, At: t0.Add(3 * time.Hour)}.Accrue(t0.Add(3*time.Hour+time.Minute), 8, halfLife).GPUSeconds
	e.waitFor(t, "usage continued after the restart", func() (bool, string) {
		v, _ := usageOf("heavy")
		return near(v, threeHours), fmt.Sprintf("heavy %d GPU-s, want %.0f (started over: about %.0f)", v, threeHours, engine.Usage{At: t0}.Accrue(t0.Add(time.Minute), 8, halfLife).GPUSeconds)
	})

	// light wants the whole node too: same weight, but heavy used everything.
	for i := range 8 {
		e.pod(t, fmt.Sprintf("light-%d", i), "light", 1, nil)
	}
	e.waitFor(t, "light takes the node back", func() (bool, string) {
		fair := map[string]string{}
		for _, q := range []string{"heavy", "light"} {
			u, err := e.dyn.Resource(queuesGVR).Get(e.ctx, q, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			fair[q], _, _ = unstructured.NestedString(u.Object, "status", "fairShare", string(GPUResource))
		}
		n := e.count(t, func(p *corev1.Pod) bool { return running(p) && p.Labels["allot.dev/queue"] == "light" })
		return fair["heavy"] == "0" && fair["light"] == "8" && n == 8, fmt.Sprintf("fair shares %v, light running %d", fair, n)
	})
	noDoubleBooking(t, e.pods(t))
}

// TestUsageIdleWhileAway: where the pods stopped with the scheduler (allot up), the hour a
// new process was away only decays the past use; it does not add an hour of 8 GPUs above
// quota, as a real cluster, whose pods ran on, would.
func TestUsageIdleWhileAway(t *testing.T) {
	e := newEnv(t, 1, 8)
	t0, now, set := movableClock()
	start := func() (stop func()) {
		return e.run(t, Options{Interval: 200 * time.Millisecond, Now: now, UsageIdleWhileAway: true, Engine: engine.Options{UsageStrength: 1}})
	}
	e.Queue(t, "heavy", 0, map[string]any{"gpu": map[string]any{"quota": 0, "overQuotaWeight": 1}})
	for i := range 8 {
		e.pod(t, fmt.Sprintf("heavy-%d", i), "heavy", 1, nil)
	}
	usageOf := func() int64 {
		u, err := e.dyn.Resource(queuesGVR).Get(e.ctx, "heavy", metav1.GetOptions{})
		if err != nil {
			return -1
		}
		v, _, _ := unstructured.NestedInt64(u.Object, "status", "usage", "gpuSeconds")
		return v
	}
	near := func(got int64, want float64) bool { return math.Abs(float64(got)-want) <= 0.002*want+1 }
	halfLife := engine.DefaultUsageHalfLife

	stop := start()
	e.waitFor(t, "heavy's 8 pods running", func() (bool, string) {
		n := e.count(t, running)
		return n == 8, fmt.Sprintf("%d running", n)
	})
	e.waitFor(t, "usage counted from now", func() (bool, string) { return usageOf() >= 0, "no status yet" })
	set(2 * time.Hour)
	twoHours := engine.Usage{At: t0}.Accrue(t0.Add(2*time.Hour), 8, halfLife).GPUSeconds
	e.waitFor(t, "two hours written", func() (bool, string) {
		v := usageOf()
		return near(v, twoHours), fmt.Sprintf("heavy %d GPU-s, want %.0f", v, twoHours)
	})
	stop()

	set(3 * time.Hour)
	defer start()()
	away := engine.Usage{GPUSeconds: twoHours, At: t0.Add(2 * time.Hour)}.Decayed(t0.Add(3*time.Hour), halfLife)
	e.waitFor(t, "the new process's first cycle", func() (bool, string) {
		v := usageOf()
		return near(v, away), fmt.Sprintf("heavy %d GPU-s, want %.0f", v, away)
	})
	set(3*time.Hour + time.Minute)
	want := engine.Usage{GPUSeconds: away, At: t0.Add(3 * time.Hour)}.Accrue(t0.Add(3*time.Hour+time.Minute), 8, halfLife).GPUSeconds
	ranOn := engine.Usage{GPUSeconds: twoHours, At: t0.Add(2 * time.Hour)}.Accrue(t0.Add(3*time.Hour+time.Minute), 8, halfLife).GPUSeconds
	e.waitFor(t, "the hour away decayed only", func() (bool, string) {
		v := usageOf()
		return near(v, want), fmt.Sprintf("heavy %d GPU-s, want %.0f (had the pods run on: %.0f)", v, want, ranOn)
	})
}

// movableClock is a clock the test moves: now reads it, set puts it at t0 plus d.
func movableClock() (t0 time.Time, now func() time.Time, set func(d time.Duration)) {
	t0 = time.Now().Truncate(time.Second)
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	return t0, func() time.Time { return time.Unix(0, clock.Load()) }, func(d time.Duration) { clock.Store(t0.Add(d).UnixNano()) }
}
