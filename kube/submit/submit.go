// Package submit turns what a researcher asks for on the command line into the Kubernetes
// objects Allot schedules: a batch Job for training, an indexed Job with a headless Service
// for distributed training, a StatefulSet of one pod for interactive work (so that it can be
// suspended and resumed) and a Deployment with a Service for
// inference. It builds objects only; the CLI creates them (or prints them with --dry-run).
package submit

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// Labels on everything submit creates.
const (
	LabelWorkload = "allot.dev/workload" // the name the CLI knows the workload by
	LabelType     = "allot.dev/type"     // train | distributed | interactive | inference
	// AnnotationMinMember on a Job overrides its gang size (elastic distributed training).
	AnnotationMinMember = v1alpha1.AnnotationMinMember
	// AnnotationSimDuration makes a pod on a simulated node finish after this long.
	AnnotationSimDuration = "allot.dev/sim-duration"
	// AnnotationSimHTTP makes a pod on a simulated node answer HTTP on its --port, as the
	// workspace it stands for would (kube/simnode); nothing else reads it.
	AnnotationSimHTTP = "allot.dev/sim-http"
)

// Types of workload.
const (
	TypeTrain       = "train"
	TypeDistributed = "distributed"
	TypeInteractive = "interactive"
	TypeInference   = "inference"
)

// Spec is one submission.
type Spec struct {
	Name, Namespace, Queue, Image string
	Command                       []string
	GPUs                          string // "1", "2", "0.5"
	GPUMemory                     string // "8Gi"
	GPUCompute                    int    // percent, 0 = by share
	// ComputeMode is how the slice's compute share holds (v1alpha1.ComputeModes), within
	// what its node allows; empty leaves it to the node.
	ComputeMode string
	// GPUCount is how many GPUs a slice (-g below 1, --gpu-memory, --gpu-compute) is taken
	// of, the same slice of each; 0 means one.
	GPUCount int
	// Device choice (docs/design.md, rule 20): only these GPUs, never these, never these
	// models; "required" keeps a pod's GPUs on one island; binpack or spread per job.
	GPUUUIDs, ExcludeGPUUUIDs, ExcludeGPUTypes string
	GPUIsland, NodePolicy, GPUPolicy           string
	Interactive, Inference                     bool
	CPU, Memory                                string
	Env                                        []string // K=V
	PVCs                                       []string // CLAIM:/path
	// NFS are NFS exports to mount (SERVER:/export:/mount[:ro]), HostPaths paths of the
	// node (/node/path:/mount[:ro], which the queue's spec.hostPaths may refuse).
	NFS, HostPaths []string
	// WorkingDir is where the container starts; RunAs, when set, the uid and gid of its
	// processes; LargeSHM mounts a memory-backed /dev/shm (the runtime gives 64M).
	WorkingDir string
	RunAs      *RunAs
	LargeSHM   bool
	Port       int
	// ServiceType is how Port is reached (expose.go): clusterip, nodeport, loadbalancer or
	// ingress; empty gives inference a ClusterIP Service and other types none.
	ServiceType       string
	NodePool, GPUType string
	// TopologyRequired and TopologyPreferred name a level of the cluster's Topology: the
	// pods run within one domain of it, or packed as tightly as the levels allow.
	TopologyRequired, TopologyPreferred string
	Workers, MinWorkers                 int
	Preemptible                         *bool
	Duration                            time.Duration // simulated nodes: finish after this long
	// ManagedBy hands a Job to a multi-cluster manager (spec.managedBy,
	// multicluster.ManagedBy): it is dispatched to a worker cluster instead of run here.
	ManagedBy string
	// DeviceClass, when set, asks for whole GPUs through DRA: a ResourceClaimTemplate of
	// that DeviceClass (gpu.nvidia.com) made with the workload, each pod claiming from it,
	// instead of nvidia.com/gpu.
	DeviceClass string
	// DeviceMemoryMi is the memory of one GPU where the workload runs through DRA: a
	// fraction (-g 0.5) is claimed as that part of it (consumable capacity).
	DeviceMemoryMi int64
	// Accelerator, when set, asks for whole devices of another vendor's kind ("ascend")
	// instead of NVIDIA's GPUs: GPUs of AcceleratorResource, its kind's first resource
	// (huawei.com/Ascend910).
	Accelerator         string
	AcceleratorResource corev1.ResourceName
	// MIG asks instances of a MIG layout an admin made, by profile ("3g.40gb"): the device
	// plugin's nvidia.com/mig-<profile>, one, or GPUCount of them. MIGDynamic asks one
	// instance Allot lays out on a node labelled allot.dev/mig-dynamic (allot.dev/mig): a
	// profile, or "smallest" to hold the fraction (GPUs below 1) or GPUMemory asked.
	MIG, MIGDynamic string
	// MIGStrategy is how MIG's instances are asked (migsingle.go): MIGStrategyMixed (or
	// empty), the device plugin's nvidia.com/mig-<profile>; MIGStrategySingle, its
	// nvidia.com/gpu pinned to MIGProducts, GPU Feature Discovery's "<model>-MIG-<profile>"
	// product labels of the nodes that have them (the CLI reads them from the nodes).
	MIGStrategy string
	MIGProducts []string
	// GPUMemoryLimit and GPUFractionLimit are a dynamic fraction's limit past its request
	// (GPUMemory or a fraction): what it may use while the GPU has it free.
	GPUMemoryLimit, GPUFractionLimit string
	// MinReplicas and MaxReplicas are an inference service's replicas (--replicas): a fixed
	// number (equal), or a range a HorizontalPodAutoscaler scales in on GPU utilisation,
	// aiming at TargetGPUUtilization percent (autoscale.go). MaxReplicas 0: one replica.
	MinReplicas, MaxReplicas, TargetGPUUtilization int
	// Template is the workspace template the spec starts from (allot submit --template,
	// read by TemplateName): what the flags leave unset comes from it (template.go).
	Template     *v1alpha1.WorkspaceTemplateSpec
	TemplateName string
	// gits are the template's git repositories, cloned at start.
	gits []v1alpha1.WorkspaceData
}

var dns1123 = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// levelName is a Topology level's name or node label key.
var levelName = regexp.MustCompile(`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// Type is what the spec makes.
func (s Spec) Type() string {
	switch {
	case s.Inference:
		return TypeInference
	case s.Interactive:
		return TypeInteractive
	case s.Workers > 0:
		return TypeDistributed
	}
	return TypeTrain
}

// Objects validates the spec and builds its objects. Errors name the flag and the allowed
// values.
func (s Spec) Objects() ([]runtime.Object, error) {
	s = s.WithTemplate()
	if !dns1123.MatchString(s.Name) || len(s.Name) > 52 {
		return nil, fmt.Errorf("NAME %q is not allowed: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 52 characters", s.Name)
	}
	if s.Queue == "" {
		return nil, fmt.Errorf("-p/--queue is required (or set a default: allot config queue NAME)")
	}
	if s.Image == "" {
		return nil, fmt.Errorf("-i/--image is required (or --template, a workspace template naming one)")
	}
	if s.Interactive && s.Inference {
		return nil, fmt.Errorf("--interactive and --inference are both set: choose one")
	}
	if err := s.checkExpose(); err != nil {
		return nil, err
	}
	if s.Workers < 0 || s.MinWorkers < 0 || (s.MinWorkers > 0 && s.Workers == 0) || s.MinWorkers > s.Workers {
		return nil, fmt.Errorf("--workers %d --min-workers %d is not allowed: --min-workers needs --workers and is at most it", s.Workers, s.MinWorkers)
	}
	if s.Workers > 0 && (s.Interactive || s.Inference) {
		return nil, fmt.Errorf("--workers is for distributed training, not with --interactive or --inference")
	}
	if err := s.checkReplicas(); err != nil {
		return nil, err
	}
	pod, shareAnn, err := s.podSpec()
	if err != nil {
		return nil, err
	}
	var claims []runtime.Object
	if s.DeviceClass != "" {
		tpl, err := s.claimTemplate(&pod, shareAnn)
		if err != nil {
			return nil, err
		}
		if tpl != nil {
			claims = append(claims, tpl)
		}
	}
	meta := s.meta()
	tmpl := corev1.PodTemplateSpec{ObjectMeta: s.podMeta(), Spec: pod}
	for k, v := range shareAnn {
		tmpl.Annotations[k] = v
	}
	switch s.Type() {
	case TypeInference:
		replicas := s.replicas()
		sel := map[string]string{LabelWorkload: s.Name}
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
		d := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tmpl}}
		out := append([]runtime.Object{d}, s.exposed()...)
		if s.scaled() {
			out = append(out, s.autoscaler(d))
		}
		return append(claims, out...), nil
	case TypeInteractive:
		// A StatefulSet of one, as Kubeflow's notebooks are, not a bare pod: it can be
		// suspended (scaled to zero: by allot suspend, or by a queue's idleTimeout) and
		// resumed, its pod made again under the same name (NAME-0).
		one := int32(1)
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyAlways
		st := &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}, ObjectMeta: meta,
			Spec: appsv1.StatefulSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelWorkload: s.Name}}, Template: tmpl}}
		return append(append(claims, st), s.exposed()...), nil
	case TypeDistributed:
		n := int32(s.Workers)
		elastic := s.MinWorkers > 0 && s.MinWorkers < s.Workers
		if elastic {
			// An elastic indexed Job (completions equal to parallelism, which change
			// together): it starts at its minimum, and the scheduler raises both as its
			// workers fit, up to allot.dev/max-member, and lowers them before it stops
			// any (the Job controller removes the highest indexes).
			n = int32(s.MinWorkers)
		}
		indexed := batchv1.IndexedCompletion
		tmpl.Spec.Subdomain = s.Name
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		j := &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: meta,
			Spec: batchv1.JobSpec{Parallelism: &n, Completions: &n, CompletionMode: &indexed, Template: tmpl}}
		if s.ManagedBy != "" {
			j.Spec.ManagedBy = &s.ManagedBy
		}
		if elastic {
			j.Annotations = map[string]string{AnnotationMinMember: strconv.Itoa(s.MinWorkers), v1alpha1.AnnotationMaxMember: strconv.Itoa(s.Workers)}
		}
		s.rendezvous(&j.Spec.Template.Spec.Containers[0])
		svc := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta,
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{LabelWorkload: s.Name},
				PublishNotReadyAddresses: true, Ports: []corev1.ServicePort{{Name: "rendezvous", Port: 29500}}}}
		return append(claims, svc, j), nil
	}
	one := int32(1)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	j := &batchv1.Job{TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}, ObjectMeta: meta,
		Spec: batchv1.JobSpec{Parallelism: &one, Completions: &one, Template: tmpl}}
	if s.ManagedBy != "" {
		j.Spec.ManagedBy = &s.ManagedBy
	}
	return append(append(claims, j), s.exposed()...), nil
}

// rendezvous gives a distributed job's workers the environment torchrun reads for its
// options (PET_<OPTION>), as Kubeflow's training operator gives a PyTorchJob's: the
// number of nodes, MIN:MAX where the job is elastic, and a c10d rendezvous at the first
// worker through the job's headless service, so that "torchrun train.py" forms its group,
// and re-forms it as workers come and go, with no option written. A variable the user set
// with -e is kept.
func (s Spec) rendezvous(c *corev1.Container) {
	nodes := strconv.Itoa(s.Workers)
	if s.MinWorkers > 0 && s.MinWorkers < s.Workers {
		nodes = fmt.Sprintf("%d:%d", s.MinWorkers, s.Workers)
	}
	env := []corev1.EnvVar{
		{Name: "PET_NNODES", Value: nodes},
		{Name: "PET_RDZV_BACKEND", Value: "c10d"},
		{Name: "PET_RDZV_ENDPOINT", Value: fmt.Sprintf("%s-0.%s:29500", s.Name, s.Name)},
		{Name: "PET_RDZV_ID", Value: s.Name},
	}
	if q, ok := c.Resources.Limits[v1alpha1.GPUResource]; ok && q.Value() > 1 {
		env = append(env, corev1.EnvVar{Name: "PET_NPROC_PER_NODE", Value: strconv.FormatInt(q.Value(), 10)})
	}
	for _, e := range env {
		if !slices.ContainsFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }) {
			c.Env = append(c.Env, e)
		}
	}
}

// ParseWorkers reads --workers: N workers, or MIN:MAX, an elastic job that starts with MIN
// and grows to MAX.
func ParseWorkers(v string) (workers, min int, err error) {
	bad := fmt.Errorf("--workers %q is not allowed: a number of workers (2), or MIN:MAX for an elastic job (1:4, MIN at least 1 and at most MAX)", v)
	lo, hi, elastic := strings.Cut(v, ":")
	if !elastic {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, bad
		}
		return n, 0, nil
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || a < 1 || a > b {
		return 0, 0, bad
	}
	return b, a, nil
}

// claimTemplate moves the pod's GPUs to a claim made from a ResourceClaimTemplate of the
// workload's name, and returns that template (nil when the pod asks for no GPU): whole
// GPUs from nvidia.com/gpu, or a share (the annotations shareAnn, which it empties) as that
// much of one GPU's memory, which a GPU several claims may share gives (consumable
// capacity).
func (s Spec) claimTemplate(pod *corev1.PodSpec, shareAnn map[string]string) (*resourcev1.ResourceClaimTemplate, error) {
	c := &pod.Containers[0]
	req := resourcev1.ExactDeviceRequest{DeviceClassName: s.DeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
	q, whole := c.Resources.Limits[v1alpha1.GPUResource]
	share, _ := v1alpha1.ParseGPUShare(shareAnn)
	switch {
	case whole:
		delete(c.Resources.Limits, v1alpha1.GPUResource)
		req.Count = q.Value()
	case share.Shared():
		if s.GPUCompute != 0 {
			return nil, fmt.Errorf("--gpu-compute through DRA (device class %s) is not offered: a share there is of the GPU's memory, and its compute is the driver's sharing configuration", s.DeviceClass)
		}
		mem := share.Memory
		if mem == 0 {
			if s.DeviceMemoryMi <= 0 {
				return nil, fmt.Errorf("-g/--gpu %s through DRA (device class %s) is claimed as that part of a GPU's memory, and the GPUs' memory is not known here: give --gpu-memory instead", s.GPUs, s.DeviceClass)
			}
			mem = int64(share.Fraction*float64(s.DeviceMemoryMi)) << 20
		}
		req.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": *resource.NewQuantity(mem, resource.BinarySI)}}
		for k := range shareAnn {
			if k == v1alpha1.AnnotationGPUFraction || k == v1alpha1.AnnotationGPUMemory {
				delete(shareAnn, k)
			}
		}
	default:
		return nil, nil
	}
	c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: "gpu"})
	pod.ResourceClaims = append(pod.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: &s.Name})
	return &resourcev1.ResourceClaimTemplate{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"}, ObjectMeta: s.meta(),
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}}, nil
}

func (s Spec) meta() metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace,
		Labels: map[string]string{LabelWorkload: s.Name, LabelType: s.Type(), v1alpha1.LabelQueue: s.Queue}}
	if s.TemplateName != "" {
		m.Labels[LabelTemplate] = s.TemplateName
	}
	return m
}

func (s Spec) podMeta() metav1.ObjectMeta {
	m := metav1.ObjectMeta{Labels: map[string]string{LabelWorkload: s.Name, LabelType: s.Type(), v1alpha1.LabelQueue: s.Queue},
		Annotations: map[string]string{}}
	if s.TemplateName != "" {
		m.Labels[LabelTemplate] = s.TemplateName
	}
	switch s.Type() {
	case TypeInteractive:
		m.Labels[v1alpha1.LabelClass] = v1alpha1.ClassInteractive
	case TypeInference:
		m.Labels[v1alpha1.LabelClass] = v1alpha1.ClassInference
	default:
		m.Labels[v1alpha1.LabelClass] = v1alpha1.ClassTrain
	}
	if s.Preemptible != nil {
		m.Labels[v1alpha1.LabelPreemptible] = strconv.FormatBool(*s.Preemptible)
	}
	if s.GPUType != "" {
		m.Annotations[v1alpha1.AnnotationGPUTypes] = s.GPUType
	}
	if s.Duration > 0 {
		m.Annotations[AnnotationSimDuration] = s.Duration.String()
	}
	if s.Port > 0 && (s.Interactive || s.Inference) {
		m.Annotations[AnnotationSimHTTP] = strconv.Itoa(s.Port)
	}
	return m
}

// podSpec builds the pod and the sharing annotations its metadata needs.
func (s Spec) podSpec() (corev1.PodSpec, map[string]string, error) {
	c := corev1.Container{Name: "main", Image: s.Image, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}}
	if len(s.Command) > 0 {
		c.Command = s.Command
	}
	ann := map[string]string{}
	gpus := strings.TrimSpace(s.GPUs)
	if s.Accelerator != "" {
		if err := s.checkAccelerator(gpus); err != nil {
			return corev1.PodSpec{}, nil, err
		}
	}
	if s.MIG != "" || s.MIGDynamic != "" || s.MIGStrategy != "" {
		if err := s.checkMIG(gpus); err != nil {
			return corev1.PodSpec{}, nil, err
		}
	}
	switch {
	case s.single():
		// nvidia.com/gpu and the product pin, written with the pod spec below.
	case s.MIG != "":
		// A fixed layout's instances are the device plugin's to hand over, as whole GPUs are.
		c.Resources.Limits[corev1.ResourceName(v1alpha1.MIGResourcePrefix+s.MIG)] = *resource.NewQuantity(int64(max(s.GPUCount, 1)), resource.DecimalSI)
	case s.MIGDynamic != "" && s.MIGDynamic != v1alpha1.MIGSmallest:
		ann[v1alpha1.AnnotationMIG] = s.MIGDynamic
	case gpus != "" && s.GPUMemory != "":
		return corev1.PodSpec{}, nil, fmt.Errorf("-g/--gpu %s and --gpu-memory %s are both set: ask for GPUs or for GPU memory, not both", gpus, s.GPUMemory)
	case s.GPUMemory != "":
		ann[v1alpha1.AnnotationGPUMemory] = s.GPUMemory
	case gpus != "":
		f, err := strconv.ParseFloat(gpus, 64)
		if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || (f > 1 && f != math.Trunc(f)) {
			return corev1.PodSpec{}, nil, fmt.Errorf("-g/--gpu %q is not allowed: a fraction between 0 and 1 (such as 0.5), a whole number of GPUs, or 0 for none", gpus)
		}
		switch {
		case f == 0:
			// No GPU, as leaving -g out: a CPU-only job of the queue.
		case f < 1:
			ann[v1alpha1.AnnotationGPUFraction] = gpus
		case s.Accelerator != "":
			c.Resources.Limits[s.AcceleratorResource] = *resource.NewQuantity(int64(f), resource.DecimalSI)
		default:
			c.Resources.Limits[v1alpha1.GPUResource] = *resource.NewQuantity(int64(f), resource.DecimalSI)
		}
	}
	if s.GPUCompute != 0 {
		if len(ann) == 0 && (gpus != "" || len(c.Resources.Limits) > 0) {
			return corev1.PodSpec{}, nil, fmt.Errorf("--gpu-compute needs a shared GPU: -g between 0 and 1, --gpu-memory, or --gpu-compute alone (not with whole GPUs)")
		}
		if s.GPUCompute < 1 || s.GPUCompute > 100 {
			return corev1.PodSpec{}, nil, fmt.Errorf("--gpu-compute %d is not allowed: a percentage from 1 to 100", s.GPUCompute)
		}
		ann[v1alpha1.AnnotationGPUCompute] = strconv.Itoa(s.GPUCompute)
	}
	if s.ComputeMode != "" {
		if _, err := v1alpha1.ParseComputeMode("--compute", s.ComputeMode); err != nil {
			return corev1.PodSpec{}, nil, err
		}
		if len(ann) == 0 || s.MIG != "" || s.MIGDynamic != "" {
			return corev1.PodSpec{}, nil, fmt.Errorf("--compute %s needs a shared GPU: -g between 0 and 1, --gpu-memory or --gpu-compute (a whole GPU's or a MIG instance's compute is its own)", s.ComputeMode)
		}
		ann[v1alpha1.AnnotationComputeMode] = s.ComputeMode
	}
	if s.MIGDynamic == v1alpha1.MIGSmallest {
		ann[v1alpha1.AnnotationMIG] = v1alpha1.MIGSmallest // sized by the fraction or memory above
	}
	if s.GPUCount != 0 && s.MIG == "" {
		if s.GPUCount < 1 || len(ann) == 0 {
			return corev1.PodSpec{}, nil, fmt.Errorf("--gpu-count %d is not allowed: 1 or more, with a slice (-g between 0 and 1, --gpu-memory or --gpu-compute); for whole GPUs give -g N", s.GPUCount)
		}
		ann[v1alpha1.AnnotationGPUCount] = strconv.Itoa(s.GPUCount)
	}
	if s.GPUMemoryLimit != "" || s.GPUFractionLimit != "" {
		if err := s.checkLimit(ann); err != nil {
			return corev1.PodSpec{}, nil, err
		}
		if s.GPUMemoryLimit != "" {
			ann[v1alpha1.AnnotationGPUMemoryLimit] = s.GPUMemoryLimit
		} else {
			ann[v1alpha1.AnnotationGPUFractionLimit] = s.GPUFractionLimit
		}
	}
	if _, err := v1alpha1.ParseGPUShare(ann); err != nil {
		return corev1.PodSpec{}, nil, err
	}
	for _, o := range []struct{ flag, key, v string }{
		{"--gpu-uuid", v1alpha1.AnnotationGPUUUIDPick, s.GPUUUIDs},
		{"--exclude-gpu-uuid", v1alpha1.AnnotationGPUUUIDExclude, s.ExcludeGPUUUIDs},
		{"--exclude-gpu-type", v1alpha1.AnnotationGPUTypeExclude, s.ExcludeGPUTypes},
		{"--gpu-island", v1alpha1.AnnotationGPUIsland, s.GPUIsland},
		{"--node-policy", v1alpha1.AnnotationNodePolicy, s.NodePolicy},
		{"--gpu-policy", v1alpha1.AnnotationGPUPolicy, s.GPUPolicy},
	} {
		if o.v == "" {
			continue
		}
		if _, err := v1alpha1.ParseGPUChoice(map[string]string{o.key: o.v}); err != nil {
			return corev1.PodSpec{}, nil, fmt.Errorf("%s: %w", o.flag, err)
		}
		ann[o.key] = o.v
	}
	for flag, v := range map[string]string{"--cpu": s.CPU, "--memory": s.Memory} {
		if v == "" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return corev1.PodSpec{}, nil, fmt.Errorf("%s %q is not a positive quantity such as 4 or 500m (CPU), 16Gi (memory)", flag, v)
		}
		name := corev1.ResourceCPU
		if flag == "--memory" {
			name = corev1.ResourceMemory
		}
		c.Resources.Requests[name] = q
	}
	for _, kv := range s.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return corev1.PodSpec{}, nil, fmt.Errorf("-e %q is not allowed: write NAME=VALUE", kv)
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	var vols []corev1.Volume
	for i, pv := range s.PVCs {
		claim, path, ok := strings.Cut(pv, ":")
		if !ok || claim == "" || !strings.HasPrefix(path, "/") {
			return corev1.PodSpec{}, nil, fmt.Errorf("--pvc %q is not allowed: write CLAIM:/mount/path", pv)
		}
		name := fmt.Sprintf("pvc-%d", i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path})
	}
	if s.Port > 0 {
		if s.Port > 65535 {
			return corev1.PodSpec{}, nil, fmt.Errorf("--port %d is not allowed: 1 to 65535", s.Port)
		}
		c.Ports = []corev1.ContainerPort{{ContainerPort: int32(s.Port)}}
	}
	for _, t := range [][3]string{{"--topology-required", v1alpha1.AnnotationTopologyRequired, s.TopologyRequired},
		{"--topology-preferred", v1alpha1.AnnotationTopologyPreferred, s.TopologyPreferred}} {
		if t[2] == "" {
			continue
		}
		if !levelName.MatchString(t[2]) {
			return corev1.PodSpec{}, nil, fmt.Errorf("%s %q is not allowed: a level of the cluster's Topology, by name (rack) or node label (topology.kubernetes.io/zone); kubectl get topologies lists them", t[0], t[2])
		}
		ann[t[1]] = t[2]
	}
	spec := corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, Containers: []corev1.Container{c}, Volumes: vols}
	if s.NodePool != "" {
		pools, err := convert.ParsePools(s.NodePool)
		if err != nil {
			return corev1.PodSpec{}, nil, fmt.Errorf("--node-pool %q: %w", s.NodePool, err)
		}
		if len(pools) == 1 && pools[0] != v1alpha1.DefaultPool {
			spec.NodeSelector = map[string]string{v1alpha1.LabelNodePool: s.NodePool}
		} else {
			// Several pools, tried in order, or the default pool (the nodes with no
			// label, which no node selector can name): the scheduler reads the list.
			ann[v1alpha1.AnnotationNodePools] = strings.Join(pools, ",")
		}
	}
	if s.single() {
		s.askSingleMIG(&spec.Containers[0], &spec)
	}
	if err := s.workspace(&spec, ann); err != nil {
		return corev1.PodSpec{}, nil, err
	}
	if err := s.clone(&spec); err != nil {
		return corev1.PodSpec{}, nil, err
	}
	return spec, ann, nil
}

// checkAccelerator refuses what a request of another vendor's devices cannot have: a
// slice of one (fractions, memory and compute are NVIDIA GPUs only), or devices through
// DRA.
func (s Spec) checkAccelerator(gpus string) error {
	if s.AcceleratorResource == "" {
		return fmt.Errorf("--accelerator %s: no resource to ask it by", s.Accelerator)
	}
	if f, err := strconv.ParseFloat(gpus, 64); err == nil && f > 0 && f < 1 {
		return fmt.Errorf("-g %s with --accelerator %s is not allowed: fractions are NVIDIA GPUs only; give a whole number of %s devices", gpus, s.Accelerator, s.Accelerator)
	}
	for _, o := range []struct {
		flag string
		set  bool
	}{{"--gpu-memory", s.GPUMemory != ""}, {"--gpu-compute", s.GPUCompute != 0}, {"--gpu-count", s.GPUCount != 0}} {
		if o.set {
			return fmt.Errorf("%s with --accelerator %s is not allowed: fractions are NVIDIA GPUs only; give -g with a whole number of %s devices", o.flag, s.Accelerator, s.Accelerator)
		}
	}
	if s.DeviceClass != "" {
		return fmt.Errorf("--accelerator %s through DRA is not offered: Allot claims NVIDIA GPUs only (--gpu-api device-plugin)", s.Accelerator)
	}
	return nil
}

// checkLimit refuses a dynamic fraction's limit where it means nothing, naming the flags:
// without a slice of one GPU to go past, below the request, in two forms at once, or not
// a quantity or fraction. (ParseGPUShare checks the annotations again, as the webhook will.)
func (s Spec) checkLimit(ann map[string]string) error {
	flag, v := "--gpu-memory-limit", s.GPUMemoryLimit
	if v == "" {
		flag, v = "--gpu-fraction-limit", s.GPUFractionLimit
	}
	_, frac := ann[v1alpha1.AnnotationGPUFraction]
	_, mem := ann[v1alpha1.AnnotationGPUMemory]
	switch {
	case s.GPUMemoryLimit != "" && s.GPUFractionLimit != "":
		return fmt.Errorf("--gpu-memory-limit %s and --gpu-fraction-limit %s are both set: give the limit one way", s.GPUMemoryLimit, s.GPUFractionLimit)
	case !frac && !mem:
		return fmt.Errorf("%s %s needs a slice of one GPU to go past: --gpu-memory (such as 10Gi) or -g between 0 and 1 (such as 0.25)", flag, v)
	case s.GPUCount > 1:
		return fmt.Errorf("%s %s with --gpu-count %d is not allowed: a limit past the request is for a slice of one GPU", flag, v, s.GPUCount)
	case s.DeviceClass != "":
		return fmt.Errorf("%s through DRA (device class %s) is not offered: a claim's share of a GPU is its capacity, with no limit past it (--gpu-api device-plugin)", flag, s.DeviceClass)
	}
	if s.GPUMemoryLimit != "" {
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		b, whole := q.AsInt64()
		if err != nil || !whole || b < 1<<20 || b > 1<<50 {
			return fmt.Errorf("--gpu-memory-limit %q is not allowed: a whole quantity of GPU memory from 1Mi up to 1Pi, such as 40Gi", v)
		}
		if r, err := resource.ParseQuantity(s.GPUMemory); mem && err == nil && q.Cmp(r) < 0 {
			return fmt.Errorf("--gpu-memory-limit %s is less than --gpu-memory %s: a limit is at least the memory asked", v, s.GPUMemory)
		}
		return nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(f > 0 && f <= 1) {
		return fmt.Errorf("--gpu-fraction-limit %q is not allowed: a fraction of the GPU above 0 and up to 1, such as 0.75", v)
	}
	if r, err := strconv.ParseFloat(ann[v1alpha1.AnnotationGPUFraction], 64); frac && err == nil && f < r {
		return fmt.Errorf("--gpu-fraction-limit %s is less than -g %s: a limit is at least the fraction asked", v, ann[v1alpha1.AnnotationGPUFraction])
	}
	return nil
}

// Request is what a spec's pods ask of the nodes, for checking that some node can ever hold
// them.
type Request struct {
	Pods     int      // pods that must run at once: a gang's members, else 1
	GPUs     int64    // whole GPUs per pod
	MemoryMi int64    // GPU memory per pod, when the pod shares a GPU by memory
	Pool     string   // node pool, "" for nodes outside every pool
	Models   []string // GPU models allowed, empty for any
	// Accelerator is the kind of the devices GPUs counts ("ascend"); empty for NVIDIA's.
	Accelerator string
	// MIG is the MIG profile each pod asks (or v1alpha1.MIGSmallest, sized by Fraction or
	// MemoryMi), MIGCount how many instances of it, and MIGDynamic whether Allot lays them
	// out (else a fixed layout's, advertised by the device plugin).
	MIG        string
	MIGCount   int
	MIGDynamic bool
	// MIGSingle: the instances are asked as the device plugin's single strategy gives them,
	// on the nodes whose product label is one of MIGProducts.
	MIGSingle   bool
	MIGProducts []string
	Fraction    float64 // of one GPU, when the pod shares one by a fraction
}

// Pools are the node pools the spec's pods try, in order, as the scheduler reads them
// for queue q (nil where it cannot be read): "" is the default pool. Its error is the
// webhook's, for a pool the queue does not allow.
func (s Spec) Pools(q *v1alpha1.Queue) ([]string, error) {
	spec, ann, err := s.podSpec()
	if err != nil {
		return nil, err
	}
	m := s.podMeta()
	for k, v := range ann {
		m.Annotations[k] = v
	}
	return convert.Pools(&corev1.Pod{ObjectMeta: m, Spec: spec}, q)
}

// Request is what the spec's pods ask (after Objects has validated the spec).
func (s Spec) Request() Request {
	r := Request{Pods: 1, Pool: s.NodePool, Accelerator: s.Accelerator}
	switch {
	case s.MinWorkers > 0:
		r.Pods = s.MinWorkers
	case s.Workers > 0:
		r.Pods = s.Workers
	}
	if f, err := strconv.ParseFloat(strings.TrimSpace(s.GPUs), 64); err == nil && f >= 1 {
		r.GPUs = int64(f)
	} else if err == nil && f > 0 {
		r.Fraction = f
	}
	switch {
	case s.MIG != "":
		r.MIG, r.MIGCount = s.MIG, max(s.GPUCount, 1)
		r.MIGSingle, r.MIGProducts = s.single(), s.MIGProducts
	case s.MIGDynamic != "":
		r.MIG, r.MIGCount, r.MIGDynamic = s.MIGDynamic, 1, true
	}
	if q, err := resource.ParseQuantity(s.GPUMemory); err == nil && s.GPUMemory != "" {
		r.MemoryMi = q.Value() / (1 << 20)
	}
	for _, m := range strings.Split(s.GPUType, ",") {
		if m = strings.TrimSpace(m); m != "" {
			r.Models = append(r.Models, m)
		}
	}
	return r
}
