package submit

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/mig"
)

// The NVIDIA device plugin gives a fixed MIG layout's instances two ways. Under its mixed
// strategy each profile is a resource of its own (nvidia.com/mig-1g.10gb); under its
// single strategy every GPU of a node has instances of one profile, advertised as
// nvidia.com/gpu, and GPU Feature Discovery labels the node's product
// "<model>-MIG-<profile>". A pod asks the latter with nvidia.com/gpu pinned to that
// product, which is what convert.FixedMIG reads as instances (and nothing else does:
// nvidia.com/gpu unpinned is whole GPUs). --mig writes one or the other.

// MIG strategies of Spec.MIGStrategy, as the device plugin names them.
const (
	MIGStrategyMixed  = "mixed"
	MIGStrategySingle = "single"
)

// checkMIGStrategy refuses a strategy that is not one, and one without --mig, naming the
// flags.
func (s Spec) checkMIGStrategy() error {
	switch s.MIGStrategy {
	case "", MIGStrategyMixed:
		if s.MIGStrategy != "" && s.MIG == "" {
			return fmt.Errorf("--mig-strategy %s needs --mig PROFILE: it says how a fixed layout's instances are asked", s.MIGStrategy)
		}
		return nil
	case MIGStrategySingle:
	default:
		return fmt.Errorf("--mig-strategy %q is not allowed: mixed (the device plugin's %sPROFILE) or single (%s pinned to the nodes' %s <model>-MIG-PROFILE)",
			s.MIGStrategy, v1alpha1.MIGResourcePrefix, v1alpha1.GPUResource, v1alpha1.LabelGPUProduct)
	}
	if s.MIG == "" {
		return fmt.Errorf("--mig-strategy single needs --mig PROFILE: it says how a fixed layout's instances are asked (--mig-dynamic's are Allot's to lay out)")
	}
	return nil
}

// checkMIGProducts refuses a single strategy without products of the profile to pin.
func (s Spec) checkMIGProducts() error {
	if !s.single() {
		return nil
	}
	if len(s.MIGProducts) == 0 {
		return fmt.Errorf("--mig-strategy single: no %s to pin: the nodes' <model>-MIG-%s (read from the cluster's nodes; with --dry-run give the model with --gpu-type)", v1alpha1.LabelGPUProduct, s.MIG)
	}
	for _, p := range s.MIGProducts {
		if _, prof, ok := mig.SingleProduct(p); !ok || mig.TrimMedia(prof) != mig.TrimMedia(s.MIG) {
			return fmt.Errorf("--mig %s --mig-strategy single: product %q is not a <model>-MIG-%s of GPU Feature Discovery's single strategy", s.MIG, p, s.MIG)
		}
	}
	return nil
}

// single reports whether --mig's instances are asked as the single strategy's.
func (s Spec) single() bool { return s.MIG != "" && s.MIGStrategy == MIGStrategySingle }

// askSingleMIG asks the spec's instances as the single strategy's: nvidia.com/gpu, pinned
// to the product by nodeSelector where there is one, else by a required node affinity
// allowing those products only (nodes of several models with instances of the profile).
func (s Spec) askSingleMIG(c *corev1.Container, spec *corev1.PodSpec) {
	c.Resources.Limits[v1alpha1.GPUResource] = *resource.NewQuantity(int64(max(s.GPUCount, 1)), resource.DecimalSI)
	products := slices.Clone(s.MIGProducts)
	slices.Sort(products)
	products = slices.Compact(products)
	if len(products) == 1 {
		if spec.NodeSelector == nil {
			spec.NodeSelector = map[string]string{}
		}
		spec.NodeSelector[v1alpha1.LabelGPUProduct] = products[0]
		return
	}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelGPUProduct, Operator: corev1.NodeSelectorOpIn, Values: products}}}}}}}
}

// checkMIG refuses what a MIG request cannot be given with, naming the flags: MIG is
// NVIDIA's and the device plugin's (no other kind, no DRA), an instance's size and compute
// are its profile's (no -g, --gpu-memory or --gpu-compute beside a profile), and only a
// fixed layout gives one pod several instances.
func (s Spec) checkMIG(gpus string) error {
	if err := s.checkMIGStrategy(); err != nil {
		return err
	}
	flag, v := "--mig", s.MIG
	if v == "" {
		flag, v = "--mig-dynamic", s.MIGDynamic
	}
	switch {
	case s.MIG != "" && s.MIGDynamic != "":
		return fmt.Errorf("--mig %s and --mig-dynamic %s are both set: --mig takes an instance of a layout an admin made (the device plugin's %sPROFILE), --mig-dynamic one Allot lays out; choose one",
			s.MIG, s.MIGDynamic, v1alpha1.MIGResourcePrefix)
	case s.Accelerator != "":
		return fmt.Errorf("%s with --accelerator %s is not allowed: MIG instances are NVIDIA GPUs only", flag, s.Accelerator)
	case s.DeviceClass != "":
		return fmt.Errorf("%s through DRA (device class %s) is not offered: Allot asks MIG instances of the device plugin (--gpu-api device-plugin)", flag, s.DeviceClass)
	case s.GPUCompute != 0:
		return fmt.Errorf("--gpu-compute with %s is not allowed: an instance's compute is its profile's (a 3g has three of the GPU's compute slices)", flag)
	case s.GPUMemoryLimit != "" || s.GPUFractionLimit != "":
		return fmt.Errorf("a limit past the request (--gpu-memory-limit, --gpu-fraction-limit) with %s is not allowed: the GPU holds a MIG instance to its own memory", flag)
	}
	if s.MIG == v1alpha1.MIGSmallest {
		return fmt.Errorf("--mig %s is not allowed: a fixed layout's instances are asked by profile, such as 1g.10gb or 3g.40gb; for the smallest instance that holds -g or --gpu-memory, Allot lays it out: --mig-dynamic %s", v, v)
	}
	if v != v1alpha1.MIGSmallest {
		if _, _, err := mig.ParseName(v); err != nil {
			alt := ", or smallest (with -g below 1 or --gpu-memory)"
			if flag == "--mig" {
				alt = ""
			}
			return fmt.Errorf("%s %q is not allowed: a MIG profile <compute>g.<memory>gb, such as 1g.10gb or 3g.40gb%s", flag, v, alt)
		}
	}
	if err := s.checkMIGProducts(); err != nil {
		return err
	}
	asked := gpus != "" && gpus != "0"
	switch {
	case s.MIG != "" && (asked || s.GPUMemory != ""):
		return fmt.Errorf("-g or --gpu-memory with --mig %s is not allowed: the instance is the request; for several instances give --gpu-count N", v)
	case s.MIG != "" && (s.GPUCount < 0 || s.GPUCount > v1alpha1.MaxGPUCount):
		return fmt.Errorf("--gpu-count %d is not allowed: how many %s instances each pod takes, from 1 to %d", s.GPUCount, v, v1alpha1.MaxGPUCount)
	case s.MIG != "":
		return nil
	case s.GPUCount != 0:
		return fmt.Errorf("--gpu-count with --mig-dynamic is not allowed: an instance Allot lays out is one per pod (several instances of a fixed layout: --mig PROFILE --gpu-count N)")
	case v != v1alpha1.MIGSmallest && (asked || s.GPUMemory != ""):
		return fmt.Errorf("-g or --gpu-memory with --mig-dynamic %s is not allowed: the profile is the size; to size the instance by them give --mig-dynamic smallest", v)
	case v == v1alpha1.MIGSmallest && !asked && s.GPUMemory == "":
		return fmt.Errorf("--mig-dynamic smallest needs the size to hold: -g between 0 and 1 (such as 0.25) or --gpu-memory (such as 10Gi)")
	}
	if f, err := strconv.ParseFloat(gpus, 64); v == v1alpha1.MIGSmallest && asked && err == nil && f >= 1 {
		return fmt.Errorf("-g %s with --mig-dynamic smallest is not allowed: one instance is at most a whole GPU; give a fraction between 0 and 1 (such as 0.25) or --gpu-memory", gpus)
	}
	return nil
}
