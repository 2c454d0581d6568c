package trace

import (
	"encoding/csv"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Variant is how to derive a pod list from a published one, for mixes the published family
// does not cover. Only the proportions of pod shapes matter to a replay, which resamples
// the list to its target demand, so a variant changes proportions and nothing else.
type Variant struct {
	// CPUOnly multiplies the number of CPU-only pods (2 doubles them), drawn with
	// replacement from the list's own CPU-only pods; 0 or 1 leaves them.
	CPUOnly float64
	// Sharing is the part of the GPU demand fractional pods carry (0.8, 1); whole-GPU pods
	// are left out at random until it is reached; 0 leaves them.
	Sharing float64
	Seed    uint64
}

// Derive builds the variant's pod list: the same pods, some left out or repeated (a
// repeated pod's name gets a suffix), in the original order with repeats at the end.
func Derive(pods []Pod, v Variant) ([]Pod, error) {
	switch {
	case v.CPUOnly < 0:
		return nil, fmt.Errorf("--cpu-only %v is not allowed: a factor, 0 or more (2 doubles the CPU-only pods)", v.CPUOnly)
	case v.Sharing < 0 || v.Sharing > 1:
		return nil, fmt.Errorf("--sharing %v is not allowed: the part of the GPU demand fractional pods carry, between 0 and 1", v.Sharing)
	}
	rng := rand.New(rand.NewPCG(v.Seed, 0x7a1e))
	out := make([]Pod, 0, len(pods))
	var cpuOnly, whole []int
	var frac, wholeDemand int64
	for i, p := range pods {
		switch {
		case p.GPUs == 0:
			cpuOnly = append(cpuOnly, i)
		case p.GPUs == 1 && p.GPUMilli < 1000:
			frac += int64(p.Demand())
		default:
			whole = append(whole, i)
			wholeDemand += int64(p.Demand())
		}
	}
	drop := map[int]bool{}
	if v.Sharing > 0 {
		if frac == 0 {
			return nil, fmt.Errorf("--sharing: the list has no fractional pods to carry the demand")
		}
		// Keep whole-GPU pods in a random order until they would pass (1−s)/s of the
		// fractional demand.
		keep := float64(frac) * (1 - v.Sharing) / v.Sharing
		order := rng.Perm(len(whole))
		var kept float64
		for _, k := range order {
			i := whole[k]
			if d := float64(pods[i].Demand()); kept+d <= keep {
				kept += d
			} else {
				drop[i] = true
			}
		}
	}
	for i, p := range pods {
		if !drop[i] {
			out = append(out, p)
		}
	}
	if v.CPUOnly > 0 && len(cpuOnly) > 0 {
		want := int(float64(len(cpuOnly))*v.CPUOnly + 0.5)
		if want < len(cpuOnly) {
			// Fewer: leave out a random part of them.
			gone := map[string]bool{}
			for _, k := range rng.Perm(len(cpuOnly))[:len(cpuOnly)-want] {
				gone[pods[cpuOnly[k]].Name] = true
			}
			kept := out[:0]
			for _, p := range out {
				if !gone[p.Name] {
					kept = append(kept, p)
				}
			}
			out = kept
		}
		for n := len(cpuOnly); n < want; n++ {
			p := pods[cpuOnly[rng.IntN(len(cpuOnly))]]
			p.Name = fmt.Sprintf("%s-x%d", p.Name, n)
			out = append(out, p)
		}
	}
	return out, nil
}

// WritePods writes pods in the openb pod list's columns that replay reads.
func WritePods(w io.Writer, pods []Pod) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"})
	for _, p := range pods {
		_ = cw.Write([]string{p.Name, strconv.FormatInt(p.CPU, 10), strconv.FormatInt(p.Memory>>20, 10), strconv.Itoa(p.GPUs),
			strconv.FormatInt(p.GPUMilli, 10), strings.Join(p.GPUTypes, "|")})
	}
	cw.Flush()
	return cw.Error()
}
