package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/agent"
)

// newAgentInventoryCmd prints what the agent reads from NVML on this machine, without a
// cluster: the inventory it writes to the Node, the load it samples, and, for --watch,
// the health events it waits on. For checking the agent on a real GPU (docs/gpu-nodes.md).
func newAgentInventoryCmd() *cobra.Command {
	var library string
	var samples int
	var every, watch time.Duration
	cmd := &cobra.Command{
		Use:    "inventory",
		Hidden: true,
		Short:  "Print what the agent reads from this machine's NVML (no cluster needed)",
		Long: `Read this machine's GPUs through NVML with the agent's own code and print the inventory it
writes to the Node (allot.dev/gpu-inventory), each device's compute mode and the health
events it can deliver, --samples readings of utilisation and used memory --every apart,
and for --watch the health events: each raw event NVML delivers, and the failures the
agent's WatchHealth reports from them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts []nvml.LibraryOption
			if library != "" {
				opts = append(opts, nvml.WithLibraryPath(library))
			}
			lib := nvml.New(opts...)
			if r := lib.Init(); r != nvml.SUCCESS {
				return fmt.Errorf("nvml init: %s", nvml.ErrorString(r))
			}
			defer lib.Shutdown()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return printInventory(ctx, cmd.OutOrStdout(), lib, samples, every, watch)
		},
	}
	f := cmd.Flags()
	f.StringVar(&library, "nvml-library", "", "path of libnvidia-ml.so.1 (default: found by the dynamic loader)")
	f.IntVar(&samples, "samples", 1, "how many readings of utilisation and used memory")
	f.DurationVar(&every, "every", time.Second, "time between readings")
	f.DurationVar(&watch, "watch", 0, "wait this long for health events (beside the readings); 0: none")
	return cmd
}

func printInventory(ctx context.Context, out io.Writer, lib nvml.Interface, samples int, every, watch time.Duration) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	driver, _ := lib.SystemGetDriverVersion()
	nvmlVersion, _ := lib.SystemGetNVMLVersion()
	cudaVersion, _ := lib.SystemGetCudaDriverVersion()
	say("driver %s, NVML %s, CUDA %d.%d", driver, nvmlVersion, cudaVersion/1000, cudaVersion%1000/10)
	inv, err := agent.ReadInventory(lib)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(inv)
	say("inventory (allot.dev/gpu-inventory): %s", b)
	for _, g := range inv {
		d, r := lib.DeviceGetHandleByIndex(g.Index)
		if r != nvml.SUCCESS {
			say("GPU %d: %s", g.Index, nvml.ErrorString(r))
			continue
		}
		mode, r := d.GetComputeMode()
		modeText := computeModeName(mode)
		if r != nvml.SUCCESS {
			modeText = nvml.ErrorString(r)
		}
		events, r := d.GetSupportedEventTypes()
		eventText := eventNames(events)
		if r != nvml.SUCCESS {
			eventText = nvml.ErrorString(r)
		}
		say("GPU %d %s: compute mode %s; events it delivers: %s", g.Index, g.UUID, modeText, eventText)
	}

	var wg sync.WaitGroup
	if watch > 0 {
		wctx, cancel := context.WithTimeout(ctx, watch)
		defer cancel()
		wg.Add(2)
		go func() {
			defer wg.Done()
			failures, start := 0, time.Now()
			err := agent.WatchHealth(wctx, lib, inv, func(f agent.Failure) {
				failures++
				say("WatchHealth: GPU %d failed: %s", f.Index, f.Reason)
			})
			if err != nil {
				say("WatchHealth: %v", err)
				return
			}
			say("WatchHealth: %d failure(s) reported in %s", failures, time.Since(start).Round(time.Second))
		}()
		go func() {
			defer wg.Done()
			rawEvents(wctx, lib, inv, say)
		}()
	}
	for i := range samples {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(every):
			}
		}
		s := agent.ReadSample(lib, len(inv))
		say("sample %d: utilization %v %%, memory used %v MiB, lost %v", i+1, s.Utilization, s.MemoryUsed, s.Lost)
	}
	wg.Wait()
	return nil
}

// rawEvents prints every XID and ECC event NVML delivers until ctx ends, beside the
// agent's own event set, so that events WatchHealth rightly ignores are seen too.
func rawEvents(ctx context.Context, lib nvml.Interface, inv []v1alpha1.GPUInfo, say func(string, ...any)) {
	set, r := lib.EventSetCreate()
	if r != nvml.SUCCESS {
		say("raw events: EventSetCreate: %s", nvml.ErrorString(r))
		return
	}
	defer set.Free()
	const want = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError
	for _, g := range inv {
		d, r := lib.DeviceGetHandleByIndex(g.Index)
		if r != nvml.SUCCESS {
			continue
		}
		supported, _ := d.GetSupportedEventTypes()
		if r := d.RegisterEvents(supported&want, set); r != nvml.SUCCESS {
			say("raw events: GPU %d RegisterEvents: %s", g.Index, nvml.ErrorString(r))
		} else {
			say("raw events: GPU %d registered for %s", g.Index, eventNames(supported&want))
		}
	}
	for ctx.Err() == nil {
		e, r := set.Wait(500)
		if r == nvml.ERROR_TIMEOUT {
			continue
		}
		if r != nvml.SUCCESS {
			say("raw events: Wait: %s", nvml.ErrorString(r))
			time.Sleep(time.Second)
			continue
		}
		uuid := ""
		if e.Device != nil {
			uuid, _ = e.Device.GetUUID()
		}
		say("raw event: %s data %d on %s", eventNames(e.EventType), e.EventData, uuid)
	}
}

func computeModeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return "DEFAULT"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "EXCLUSIVE_THREAD"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "PROHIBITED"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "EXCLUSIVE_PROCESS"
	}
	return fmt.Sprint(int(m))
}

func eventNames(mask uint64) string {
	names := []struct {
		bit  uint64
		name string
	}{
		{nvml.EventTypeSingleBitEccError, "single-bit-ecc"},
		{nvml.EventTypeDoubleBitEccError, "double-bit-ecc"},
		{nvml.EventTypePState, "pstate"},
		{nvml.EventTypeXidCriticalError, "xid-critical"},
		{nvml.EventTypeClock, "clock"},
		{nvml.EventTypePowerSourceChange, "power-source"},
	}
	var out []string
	for _, n := range names {
		if mask&n.bit != 0 {
			out = append(out, n.name)
			mask &^= n.bit
		}
	}
	if mask != 0 {
		out = append(out, fmt.Sprintf("0x%x", mask))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}
