package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/allot-dev/allot/kube/simnode"
	"github.com/allot-dev/allot/mig"
)

// parseSingleMIGNodes reads allot up's --mig-single (NODESxGPUS[:PROFILE]) into groups of
// simulated nodes of the device plugin's single MIG strategy, of the --gpu-type model:
// each GPU laid out with as many instances of the profile as it holds (the model's
// smallest by default: seven 1g.10gb on an A100-80GB), given as nvidia.com/gpu with GPU
// Feature Discovery's single-strategy labels, the real agent on each; named migsingle-1 ….
func parseSingleMIGNodes(values []string, gpuType string, memMi int64) ([]simnode.Spec, error) {
	model, hasMIG := mig.ForProduct(gpuType, memMi<<20)
	var out []simnode.Spec
	for i, v := range values {
		dims, profile, hasProfile := strings.Cut(v, ":")
		n, g, ok := strings.Cut(dims, "x")
		count, err1 := strconv.Atoi(n)
		gpus, err2 := strconv.Atoi(g)
		if !ok || err1 != nil || err2 != nil || count < 1 || count > 500 || gpus < 1 || gpus > 16 || (hasProfile && profile == "") {
			return nil, fmt.Errorf("--mig-single %q is not allowed: NODESxGPUS[:PROFILE] such as 1x2 or 1x2:2g.20gb, 1 to 500 nodes of 1 to 16 GPUs, and a MIG profile of the --gpu-type model", v)
		}
		if !hasMIG {
			return nil, fmt.Errorf("--mig-single %s: GPU type %q has no MIG: families %s", v, gpuType, strings.Join(mig.Families(), ", "))
		}
		if !hasProfile {
			profile = model.Profiles[0].Name
		}
		p, ok := model.Profile(profile)
		if !ok || strings.Contains(profile, "+") {
			return nil, fmt.Errorf("--mig-single %s: MIG profile %q is not one of %s's: %s (one profile: the single strategy gives instances of one)",
				v, profile, model.Name, strings.Join(model.Names(), ", "))
		}
		prefix := "migsingle"
		if i > 0 {
			prefix = fmt.Sprintf("migsingle%d", i+1)
		}
		room := model.Room(0)[slices.IndexFunc(model.Profiles, func(q mig.Profile) bool { return q.Name == p.Name })]
		s := simnode.Spec{Prefix: prefix, Count: count, GPUs: gpus, GPUType: gpuType, GPUMemoryMi: memMi,
			CPU: "128", Memory: "1Ti", MIGStrategy: "single", MIGLayout: slices.Repeat([]string{p.Name}, room)}
		if err := s.CheckMIG(); err != nil {
			return nil, fmt.Errorf("--mig-single %s: %w", v, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// singleHint is what allot up's hint adds to --mig PROFILE for single-strategy nodes where
// mixed-strategy nodes have the profile too: submit then asks the mixed strategy's.
func singleHint(nodes []simnode.Spec, profile string) string {
	if slices.ContainsFunc(nodes, func(s simnode.Spec) bool { return s.MIGStrategy != "single" && slices.Contains(s.MIGLayout, profile) }) {
		return " --mig-strategy single"
	}
	return ""
}
