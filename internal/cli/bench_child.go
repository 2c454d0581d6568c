package cli

import (
	"encoding/json"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/allot-dev/allot/kube/bench"
)

// schedulerClientHook, when set, is handed the scheduler's client configuration before it
// connects: allot bench --scenario counts the scheduler's own requests through it.
var schedulerClientHook func(*rest.Config)

// runBenchScheduler is `allot bench --as-scheduler REPORT -- [allot scheduler flags]`
// (hidden): `allot scheduler` with those flags, its requests counted and written with its
// peak memory to REPORT when it stops (SIGTERM), so that a scenario's figures are the
// scheduler's alone, not the embedded API server's that shares the bench's process.
func runBenchScheduler(cmd *cobra.Command, report, cpuProfile string, args []string) error {
	counts := bench.NewRequestCounter()
	schedulerClientHook = func(rc *rest.Config) { rc.Wrap(counts.Wrap) }
	defer func() { schedulerClientHook = nil }()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sched := newSchedulerCmd()
	sched.SetArgs(args)
	sched.SetOut(cmd.OutOrStdout())
	sched.SetErr(cmd.ErrOrStderr())
	runErr := sched.ExecuteContext(cmd.Context())
	if cpuProfile != "" {
		// Beside the CPU profile, the heap's: what is held when the scheduler stops (the
		// informers' caches, mostly) and what was allocated over the run.
		if err := bench.WriteHeapProfile(cpuProfile + ".heap"); err != nil {
			return err
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, _ := json.Marshal(bench.ChildReport{Requests: counts.Snapshot(), MaxRSS: bench.PeakRSS(), HeapSys: ms.Sys})
	if err := os.WriteFile(report, b, 0o600); err != nil {
		return err
	}
	return runErr
}
