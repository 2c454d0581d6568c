package submit

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/allot-dev/allot/api/v1alpha1"
)

func base() Spec {
	return Spec{Name: "job", Namespace: "default", Queue: "team-a", Image: "pytorch"}
}

func TestShapes(t *testing.T) {
	s := base()
	s.Workers, s.MinWorkers, s.GPUs = 4, 2, "8"
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	svc, job := objs[0].(*corev1.Service), objs[1].(*batchv1.Job)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || job.Spec.Template.Spec.Subdomain != svc.Name {
		t.Fatalf("workers do not find each other: service %+v, subdomain %q", svc.Spec, job.Spec.Template.Spec.Subdomain)
	}
	// Elastic: it starts at its minimum, completions equal to parallelism so that the
	// scheduler may change both, and names its maximum.
	if *job.Spec.Parallelism != 2 || *job.Spec.Completions != 2 || *job.Spec.CompletionMode != batchv1.IndexedCompletion ||
		job.Annotations[AnnotationMinMember] != "2" || job.Annotations[v1alpha1.AnnotationMaxMember] != "4" {
		t.Fatalf("distributed job %+v %v", job.Spec, job.Annotations)
	}
	s.TopologyRequired, s.TopologyPreferred = "rack", "kubernetes.io/hostname"
	objs, _ = s.Objects()
	if a := objs[1].(*batchv1.Job).Spec.Template.Annotations; a[v1alpha1.AnnotationTopologyRequired] != "rack" || a[v1alpha1.AnnotationTopologyPreferred] != "kubernetes.io/hostname" {
		t.Fatalf("the workers' pods do not carry the topology: %v", a)
	}
	if q := job.Spec.Template.Spec.Containers[0].Resources.Limits[v1alpha1.GPUResource]; q.Value() != 8 {
		t.Fatalf("GPUs %v", q.String())
	}

	s = base()
	s.Inference, s.Port, s.GPUs = true, 8000, "1"
	objs, _ = s.Objects()
	if d := objs[0].(*appsv1.Deployment); d.Spec.Template.Labels[v1alpha1.LabelClass] != v1alpha1.ClassInference || len(objs) != 2 {
		t.Fatalf("inference: %d objects, class %q", len(objs), d.Spec.Template.Labels[v1alpha1.LabelClass])
	}

	s = base()
	s.Interactive, s.GPUs, s.GPUCompute = true, "0.25", 40
	objs, _ = s.Objects()
	// A StatefulSet of one, so that it can be suspended and resumed (a bare pod cannot).
	st := objs[0].(*appsv1.StatefulSet)
	p := st.Spec.Template
	if *st.Spec.Replicas != 1 || st.Labels[LabelType] != TypeInteractive ||
		p.Labels[v1alpha1.LabelClass] != v1alpha1.ClassInteractive || p.Annotations[v1alpha1.AnnotationGPUFraction] != "0.25" ||
		p.Annotations[v1alpha1.AnnotationGPUCompute] != "40" || p.Spec.SchedulerName != v1alpha1.SchedulerName {
		t.Fatalf("interactive StatefulSet %+v %+v", st.ObjectMeta, st.Spec)
	}
}

func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		edit func(*Spec)
		want string
	}{
		{func(s *Spec) { s.Name = "Bad_Name" }, `NAME "Bad_Name" is not allowed`},
		{func(s *Spec) { s.Queue = "" }, "-p/--queue is required"},
		{func(s *Spec) { s.GPUs = "1.5" }, `-g/--gpu "1.5" is not allowed: a fraction between 0 and 1 (such as 0.5), a whole number of GPUs, or 0 for none`},
		{func(s *Spec) { s.GPUs = "-1" }, `-g/--gpu "-1" is not allowed: a fraction between 0 and 1 (such as 0.5), a whole number of GPUs, or 0 for none`},
		{func(s *Spec) { s.GPUs, s.GPUMemory = "1", "8Gi" }, "are both set"},
		{func(s *Spec) { s.GPUs, s.GPUCompute = "2", 30 }, "--gpu-compute needs a shared GPU"},
		{func(s *Spec) { s.GPUs, s.GPUCount = "2", 2 }, "--gpu-count 2 is not allowed"},
		{func(s *Spec) { s.GPUs, s.ComputeMode = "1", "shared" }, "--compute shared needs a shared GPU"},
		{func(s *Spec) { s.GPUs, s.ComputeMode = "0.5", "turbo" }, `--compute: "turbo" is not one of capped, fair, shared`},
		{func(s *Spec) { s.GPUs, s.GPUIsland = "2", "maybe" }, `--gpu-island: allot.dev/gpu-island: "maybe" is not allowed`},
		{func(s *Spec) { s.GPUs, s.GPUPolicy = "0.5", "pack" }, "--gpu-policy: allot.dev/gpu-policy"},
		{func(s *Spec) { s.Workers, s.MinWorkers = 2, 3 }, "--min-workers needs --workers and is at most it"},
		{func(s *Spec) { s.Interactive, s.Inference = true, true }, "choose one"},
		{func(s *Spec) { s.Env = []string{"NOVALUE"} }, `-e "NOVALUE" is not allowed: write NAME=VALUE`},
		{func(s *Spec) { s.PVCs = []string{"data"} }, `--pvc "data" is not allowed: write CLAIM:/mount/path`},
		{func(s *Spec) { s.CPU = "lots" }, `--cpu "lots" is not a positive quantity`},
		{func(s *Spec) { s.TopologyRequired = "a rack" }, `--topology-required "a rack" is not allowed: a level of the cluster's Topology`},
	} {
		s := base()
		c.edit(&s)
		if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// TestNoGPU: -g 0 is a job without GPUs, as leaving -g out is (it used to be refused as
// "not a whole number"), in the queue all the same.
func TestNoGPU(t *testing.T) {
	s := base()
	s.GPUs = "0"
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprint(objs)
	if strings.Contains(y, "nvidia.com/gpu") || strings.Contains(y, v1alpha1.AnnotationGPUFraction) || !strings.Contains(y, s.Queue) {
		t.Fatalf("-g 0 made %s", y)
	}
}

// Through DRA, whole GPUs are a claim of that many devices, and a fraction that part of one
// GPU's memory on a GPU claims may share; the pod itself asks for neither nvidia.com/gpu
// nor a fraction annotation (a pod asks one way).
func TestClaimsThroughDRA(t *testing.T) {
	s := base()
	s.GPUs, s.DeviceClass = "2", "gpu.nvidia.com"
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	tpl, job := objs[0].(*resourcev1.ResourceClaimTemplate), objs[1].(*batchv1.Job)
	c := job.Spec.Template.Spec.Containers[0]
	if tpl.Name != "job" || tpl.Spec.Spec.Devices.Requests[0].Exactly.Count != 2 || len(c.Resources.Limits) != 0 || c.Resources.Claims[0].Name != "gpu" ||
		*job.Spec.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName != "job" {
		t.Fatalf("whole GPUs through DRA: %+v %+v", tpl.Spec, job.Spec.Template.Spec)
	}
	s = base()
	s.Interactive, s.GPUs, s.DeviceClass, s.DeviceMemoryMi = true, "0.5", "gpu.nvidia.com", 81920
	objs, err = s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	tpl, st := objs[0].(*resourcev1.ResourceClaimTemplate), objs[1].(*appsv1.StatefulSet)
	p := &corev1.Pod{ObjectMeta: st.Spec.Template.ObjectMeta, Spec: st.Spec.Template.Spec}
	mem := tpl.Spec.Spec.Devices.Requests[0].Exactly.Capacity.Requests["memory"]
	if mem.String() != "40Gi" || p.Annotations[v1alpha1.AnnotationGPUFraction] != "" || v1alpha1.ResourceClaimsProblem(p) != "" {
		t.Fatalf("half a GPU through DRA: memory %s, annotations %v", mem.String(), p.Annotations)
	}
	s.GPUs, s.GPUMemory = "", "20Gi"
	if objs, err = s.Objects(); err != nil || capacity(objs[0]).Value() != 20<<30 {
		t.Fatalf("--gpu-memory 20Gi through DRA: %v", err)
	}
	s.GPUs, s.GPUMemory, s.DeviceMemoryMi = "0.5", "", 0
	if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), "give --gpu-memory instead") {
		t.Fatalf("-g 0.5 through DRA with the GPUs' memory unknown: %v", err)
	}
	s.GPUs, s.GPUMemory, s.GPUCompute = "", "20Gi", 30
	if _, err := s.Objects(); err == nil || !strings.Contains(err.Error(), "--gpu-compute through DRA") {
		t.Fatalf("--gpu-compute through DRA: %v", err)
	}
}

func capacity(o any) *resource.Quantity {
	q := o.(*resourcev1.ResourceClaimTemplate).Spec.Spec.Devices.Requests[0].Exactly.Capacity.Requests["memory"]
	return &q
}

// TestSlicesAndDeviceChoice: a compute slice alone, of two GPUs, with the device choice of
// rule 20, reaches the pod as Allot's annotations.
func TestSlicesAndDeviceChoice(t *testing.T) {
	s := base()
	s.GPUs = ""
	s.GPUCompute, s.GPUCount, s.ComputeMode = 30, 2, "fair"
	s.GPUUUIDs, s.ExcludeGPUTypes, s.GPUIsland, s.NodePolicy, s.GPUPolicy = "GPU-a,GPU-b", "T4", "required", "spread", "binpack"
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprint(objs)
	for _, want := range []string{"allot.dev/gpu-compute:30", "allot.dev/gpu-count:2", "allot.dev/gpu-compute-mode:fair", "allot.dev/gpu-uuid:GPU-a,GPU-b",
		"allot.dev/gpu-type-exclude:T4", "allot.dev/gpu-island:required", "allot.dev/node-policy:spread", "allot.dev/gpu-policy:binpack"} {
		if !strings.Contains(y, want) {
			t.Errorf("the pod lacks %s: %s", want, y)
		}
	}
	if strings.Contains(y, "nvidia.com/gpu") {
		t.Errorf("a slice asks the device plugin for whole GPUs: %s", y)
	}
}

// --accelerator asks -g whole devices of the kind's first resource instead of
// nvidia.com/gpu; a slice of one is refused with the reason, as is DRA.
func TestSubmitAccelerator(t *testing.T) {
	s := Spec{Name: "npu", Namespace: "default", Queue: "q", Image: "i", GPUs: "2", Accelerator: "ascend", AcceleratorResource: "huawei.com/Ascend910"}
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	limits := objs[0].(*batchv1.Job).Spec.Template.Spec.Containers[0].Resources.Limits
	if q := limits["huawei.com/Ascend910"]; q.Value() != 2 || len(limits) != 1 {
		t.Errorf("limits %v, want huawei.com/Ascend910: 2 alone", limits)
	}
	if r := s.Request(); r.GPUs != 2 || r.Accelerator != "ascend" {
		t.Errorf("request %+v", r)
	}
	for _, c := range []struct {
		change func(*Spec)
		want   string
	}{
		{func(s *Spec) { s.GPUs = "0.5" }, "-g 0.5 with --accelerator ascend is not allowed: fractions are NVIDIA GPUs only"},
		{func(s *Spec) { s.GPUs, s.GPUMemory = "", "8Gi" }, "--gpu-memory with --accelerator ascend is not allowed: fractions are NVIDIA GPUs only"},
		{func(s *Spec) { s.DeviceClass = "gpu.nvidia.com" }, "--accelerator ascend through DRA is not offered"},
	} {
		bad := s
		c.change(&bad)
		if _, err := bad.Objects(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

// An elastic job's workers get torchrun's options through its environment: the range of
// nodes and a c10d rendezvous at the first worker, each kept where the user set it.
func TestRendezvousForTorchrun(t *testing.T) {
	s := base()
	s.Workers, s.MinWorkers, s.GPUs = 4, 2, "8"
	s.Env = []string{"PET_RDZV_ID=mine"}
	objs, err := s.Objects()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range objs[1].(*batchv1.Job).Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	for k, want := range map[string]string{"PET_NNODES": "2:4", "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-0.job:29500",
		"PET_RDZV_ID": "mine", "PET_NPROC_PER_NODE": "8"} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q (env %v)", k, env[k], want, env)
		}
	}
	for in, want := range map[string][2]int{"3": {3, 0}, "1:4": {4, 1}, "2:2": {2, 2}} {
		n, min, err := ParseWorkers(in)
		if err != nil || n != want[0] || min != want[1] {
			t.Errorf("--workers %s: %d, %d, %v; want %v", in, n, min, err, want)
		}
	}
	for _, in := range []string{"0", "-1", "x", "3:2", "0:2", "1:", ":2", "1:2:3"} {
		if _, _, err := ParseWorkers(in); err == nil || !strings.Contains(err.Error(), "MIN:MAX") {
			t.Errorf("--workers %s: %v, want a refusal", in, err)
		}
	}
}
