package submit

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/engine"
	"github.com/allot-dev/allot/kube/convert"
)

// podOf builds the spec's objects and returns the pod its Job makes.
func podOf(t *testing.T, s Spec) *corev1.Pod {
	t.Helper()
	objs, err := s.Objects()
	if err != nil {
		t.Fatalf("%+v: %v", s, err)
	}
	tmpl := objs[len(objs)-1].(*batchv1.Job).Spec.Template
	return &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
}

// What --mig and --mig-dynamic make is what the scheduler reads as the instance asked
// (convert.MIGRequest, as the webhook and the snapshot read it): a fixed layout's
// instances by the device plugin's resource, one Allot lays out by allot.dev/mig.
func TestMIGRequests(t *testing.T) {
	for _, c := range []struct {
		name    string
		edit    func(*Spec)
		want    engine.PodRequest
		limit   string // the device plugin resource the container asks, with its count
		annMIG  string
		annFrac string
	}{
		{"fixed", func(s *Spec) { s.MIG = "3g.40gb" }, engine.PodRequest{MIG: "3g.40gb", Devices: 1, MIGFrom: engine.MIGFixed}, "nvidia.com/mig-3g.40gb=1", "", ""},
		{"fixed, two", func(s *Spec) { s.MIG, s.GPUCount = "1g.10gb", 2 }, engine.PodRequest{MIG: "1g.10gb", Devices: 2, MIGFrom: engine.MIGFixed}, "nvidia.com/mig-1g.10gb=2", "", ""},
		{"fixed, -g 0", func(s *Spec) { s.MIG, s.GPUs = "2g.20gb", "0" }, engine.PodRequest{MIG: "2g.20gb", Devices: 1, MIGFrom: engine.MIGFixed}, "nvidia.com/mig-2g.20gb=1", "", ""},
		{"dynamic profile", func(s *Spec) { s.MIGDynamic = "3g.40gb" }, engine.PodRequest{MIG: "3g.40gb", MIGFrom: engine.MIGDynamic}, "", "3g.40gb", ""},
		{"dynamic smallest by fraction", func(s *Spec) { s.MIGDynamic, s.GPUs = "smallest", "0.25" }, engine.PodRequest{MIGShare: 250, MIGFrom: engine.MIGDynamic}, "", "smallest", "0.25"},
		{"dynamic smallest by memory", func(s *Spec) { s.MIGDynamic, s.GPUMemory = "smallest", "10Gi" }, engine.PodRequest{MIGMemory: 10 << 30, MIGFrom: engine.MIGDynamic}, "", "smallest", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := base()
			c.edit(&s)
			p := podOf(t, s)
			var limits []string
			for name, q := range p.Spec.Containers[0].Resources.Limits {
				limits = append(limits, string(name)+"="+q.String())
			}
			if strings.Join(limits, ",") != c.limit {
				t.Errorf("container limits %v, want %q", limits, c.limit)
			}
			if p.Annotations[v1alpha1.AnnotationMIG] != c.annMIG || p.Annotations[v1alpha1.AnnotationGPUFraction] != c.annFrac {
				t.Errorf("annotations %v, want %s=%q and a fraction %q", p.Annotations, v1alpha1.AnnotationMIG, c.annMIG, c.annFrac)
			}
			share, err := v1alpha1.ParseGPUShare(p.Annotations)
			if err != nil {
				t.Fatal(err)
			}
			got := engine.PodRequest{GPUFraction: engine.MilliGPU(share.Fraction * 1000), GPUMemory: share.Memory}
			if err := convert.MIGRequest(p, &got); err != nil {
				t.Fatalf("the scheduler refuses the pod: %v", err)
			}
			if got.MIG != c.want.MIG || got.Devices != c.want.Devices || got.MIGFrom != c.want.MIGFrom ||
				got.MIGShare != c.want.MIGShare || got.MIGMemory != c.want.MIGMemory || got.Shared() {
				t.Errorf("the scheduler reads %+v, want %+v", got, c.want)
			}
			r := s.Request()
			if r.MIG == "" || r.MIGCount != max(c.want.Devices, 1) || r.MIGDynamic != (c.want.MIGFrom == engine.MIGDynamic) {
				t.Errorf("Request %+v does not say the MIG asked", r)
			}
		})
	}
}

// A dynamic fraction's limit is written as the annotations the webhook and the bind read;
// where it means nothing submit says why with the flags' names, before anything exists.
func TestLimitsAndMIGRefusals(t *testing.T) {
	s := base()
	s.GPUMemory, s.GPUMemoryLimit = "10Gi", "40Gi"
	if a := podOf(t, s).Annotations; a[v1alpha1.AnnotationGPUMemory] != "10Gi" || a[v1alpha1.AnnotationGPUMemoryLimit] != "40Gi" {
		t.Errorf("--gpu-memory 10Gi --gpu-memory-limit 40Gi wrote %v", a)
	}
	s = base()
	s.GPUs, s.GPUFractionLimit = "0.25", "0.75"
	p := podOf(t, s)
	if a := p.Annotations; a[v1alpha1.AnnotationGPUFraction] != "0.25" || a[v1alpha1.AnnotationGPUFractionLimit] != "0.75" {
		t.Errorf("-g 0.25 --gpu-fraction-limit 0.75 wrote %v", a)
	}
	if share, err := v1alpha1.ParseGPUShare(p.Annotations); err != nil || share.FractionLimit != 0.75 {
		t.Errorf("the webhook reads %+v, %v", share, err)
	}
	for _, c := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.GPUMemoryLimit = "40Gi" }, "--gpu-memory-limit 40Gi needs a slice of one GPU to go past: --gpu-memory (such as 10Gi) or -g between 0 and 1"},
		{func(s *Spec) { s.GPUs, s.GPUMemoryLimit = "2", "40Gi" }, "--gpu-memory-limit 40Gi needs a slice of one GPU to go past"},
		{func(s *Spec) { s.GPUMemory, s.GPUMemoryLimit = "10Gi", "8Gi" }, "--gpu-memory-limit 8Gi is less than --gpu-memory 10Gi: a limit is at least the memory asked"},
		{func(s *Spec) { s.GPUMemory, s.GPUMemoryLimit = "10Gi", "lots" }, `--gpu-memory-limit "lots" is not allowed: a whole quantity of GPU memory from 1Mi up to 1Pi, such as 40Gi`},
		{func(s *Spec) { s.GPUs, s.GPUFractionLimit = "0.5", "0.25" }, "--gpu-fraction-limit 0.25 is less than -g 0.5: a limit is at least the fraction asked"},
		{func(s *Spec) { s.GPUs, s.GPUFractionLimit = "0.5", "1.5" }, `--gpu-fraction-limit "1.5" is not allowed: a fraction of the GPU above 0 and up to 1, such as 0.75`},
		{func(s *Spec) { s.GPUs, s.GPUFractionLimit, s.GPUMemoryLimit = "0.5", "0.75", "40Gi" }, "--gpu-memory-limit 40Gi and --gpu-fraction-limit 0.75 are both set: give the limit one way"},
		{func(s *Spec) { s.GPUs, s.GPUCount, s.GPUFractionLimit = "0.5", 2, "0.75" }, "--gpu-fraction-limit 0.75 with --gpu-count 2 is not allowed: a limit past the request is for a slice of one GPU"},
		{func(s *Spec) { s.GPUs, s.GPUFractionLimit, s.DeviceClass = "0.5", "0.75", "gpu.nvidia.com" }, "--gpu-fraction-limit through DRA (device class gpu.nvidia.com) is not offered"},

		{func(s *Spec) { s.MIG = "3g" }, `--mig "3g" is not allowed: a MIG profile <compute>g.<memory>gb, such as 1g.10gb or 3g.40gb`},
		{func(s *Spec) { s.MIGDynamic = "big" }, `--mig-dynamic "big" is not allowed: a MIG profile <compute>g.<memory>gb, such as 1g.10gb or 3g.40gb, or smallest (with -g below 1 or --gpu-memory)`},
		{func(s *Spec) { s.MIG = "smallest" }, "--mig smallest is not allowed: a fixed layout's instances are asked by profile, such as 1g.10gb or 3g.40gb; for the smallest instance that holds -g or --gpu-memory, Allot lays it out: --mig-dynamic smallest"},
		{func(s *Spec) { s.MIG, s.MIGDynamic = "3g.40gb", "3g.40gb" }, "--mig 3g.40gb and --mig-dynamic 3g.40gb are both set"},
		{func(s *Spec) { s.MIG, s.GPUs = "3g.40gb", "2" }, "-g or --gpu-memory with --mig 3g.40gb is not allowed: the instance is the request; for several instances give --gpu-count N"},
		{func(s *Spec) { s.MIG, s.GPUMemory = "3g.40gb", "10Gi" }, "-g or --gpu-memory with --mig 3g.40gb is not allowed"},
		{func(s *Spec) { s.MIG, s.GPUCount = "1g.10gb", 65 }, "--gpu-count 65 is not allowed: how many 1g.10gb instances each pod takes, from 1 to 64"},
		{func(s *Spec) { s.MIG, s.GPUCompute = "3g.40gb", 30 }, "--gpu-compute with --mig is not allowed: an instance's compute is its profile's"},
		{func(s *Spec) {
			s.MIG, s.Accelerator, s.AcceleratorResource = "3g.40gb", "ascend", "huawei.com/Ascend910"
		}, "--mig with --accelerator ascend is not allowed: MIG instances are NVIDIA GPUs only"},
		{func(s *Spec) { s.MIGDynamic, s.DeviceClass = "3g.40gb", "gpu.nvidia.com" }, "--mig-dynamic through DRA (device class gpu.nvidia.com) is not offered"},
		{func(s *Spec) { s.MIGDynamic, s.GPUs, s.GPUMemoryLimit = "smallest", "0.25", "40Gi" }, "with --mig-dynamic is not allowed: the GPU holds a MIG instance to its own memory"},
		{func(s *Spec) { s.MIGDynamic, s.GPUs = "3g.40gb", "0.5" }, "-g or --gpu-memory with --mig-dynamic 3g.40gb is not allowed: the profile is the size; to size the instance by them give --mig-dynamic smallest"},
		{func(s *Spec) { s.MIGDynamic, s.GPUCount = "3g.40gb", 2 }, "--gpu-count with --mig-dynamic is not allowed: an instance Allot lays out is one per pod"},
		{func(s *Spec) { s.MIGDynamic = "smallest" }, "--mig-dynamic smallest needs the size to hold: -g between 0 and 1 (such as 0.25) or --gpu-memory (such as 10Gi)"},
		{func(s *Spec) { s.MIGDynamic, s.GPUs = "smallest", "2" }, "-g 2 with --mig-dynamic smallest is not allowed: one instance is at most a whole GPU"},
	} {
		s := base()
		c.edit(&s)
		if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", s, err, c.want)
		}
	}
}

// --mig under the device plugin's single strategy writes nvidia.com/gpu pinned to the
// nodes' product: by nodeSelector for one product, by a required affinity over several
// (nodes of two models with instances of the profile). Either is what the scheduler and the
// webhook read as that many instances (convert.FixedMIG), not whole GPUs.
func TestMIGSingleStrategyRequests(t *testing.T) {
	const a100, h100 = "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
	for _, c := range []struct {
		name     string
		products []string
		count    int
		selector string // the product the nodeSelector pins, empty for the affinity
	}{
		{"one model", []string{a100}, 0, a100},
		{"two models", []string{h100, a100, a100}, 3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := base()
			s.MIG, s.MIGStrategy, s.MIGProducts, s.GPUCount, s.NodePool = "1g.10gb", MIGStrategySingle, c.products, c.count, "inference"
			p := podOf(t, s)
			want := int64(max(c.count, 1))
			if q := p.Spec.Containers[0].Resources.Limits[v1alpha1.GPUResource]; q.Value() != want || len(p.Spec.Containers[0].Resources.Limits) != 1 {
				t.Errorf("limits %v, want %s=%d alone", p.Spec.Containers[0].Resources.Limits, v1alpha1.GPUResource, want)
			}
			if p.Spec.NodeSelector[v1alpha1.LabelNodePool] != "inference" || p.Spec.NodeSelector[v1alpha1.LabelGPUProduct] != c.selector {
				t.Errorf("nodeSelector %v, want the pool and product %q", p.Spec.NodeSelector, c.selector)
			}
			if c.selector == "" {
				terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				if len(terms) != 1 || strings.Join(terms[0].MatchExpressions[0].Values, ",") != a100+","+h100 {
					t.Errorf("affinity %+v, want one term allowing both products", terms)
				}
			}
			profile, count, single, err := convert.FixedMIG(p)
			if err != nil || profile != "1g.10gb" || count != want || !single {
				t.Errorf("the scheduler reads %q ×%d single %v (%v), want 1g.10gb ×%d of the single strategy", profile, count, single, err, want)
			}
			if r := s.Request(); !r.MIGSingle || r.MIG != "1g.10gb" || r.MIGCount != int(want) || len(r.MIGProducts) != len(c.products) {
				t.Errorf("Request %+v", r)
			}
		})
	}
	for _, c := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.MIG, s.MIGStrategy = "1g.10gb", "both" }, `--mig-strategy "both" is not allowed: mixed (the device plugin's nvidia.com/mig-PROFILE) or single (nvidia.com/gpu pinned to the nodes' nvidia.com/gpu.product <model>-MIG-PROFILE)`},
		{func(s *Spec) { s.MIGStrategy = "single" }, "--mig-strategy single needs --mig PROFILE"},
		{func(s *Spec) { s.MIGDynamic, s.MIGStrategy = "3g.40gb", "mixed" }, "--mig-strategy mixed needs --mig PROFILE"},
		{func(s *Spec) { s.MIG, s.MIGStrategy = "1g.10gb", "single" }, "--mig-strategy single: no nvidia.com/gpu.product to pin: the nodes' <model>-MIG-1g.10gb (read from the cluster's nodes; with --dry-run give the model with --gpu-type)"},
		{func(s *Spec) {
			s.MIG, s.MIGStrategy, s.MIGProducts = "1g.10gb", "single", []string{"NVIDIA-A100-SXM4-80GB-MIG-2g.20gb"}
		}, `--mig 1g.10gb --mig-strategy single: product "NVIDIA-A100-SXM4-80GB-MIG-2g.20gb" is not a <model>-MIG-1g.10gb`},
		{func(s *Spec) {
			s.MIG, s.MIGStrategy, s.MIGProducts, s.GPUs = "1g.10gb", "single", []string{"NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}, "2"
		}, "-g or --gpu-memory with --mig 1g.10gb is not allowed"},
	} {
		s := base()
		c.edit(&s)
		if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", s, err, c.want)
		}
	}
}
