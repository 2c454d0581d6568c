// Package submission sends a submission (kube/submit builds its objects) to the API server
// as whoever submits: it settles what the spec leaves to the cluster (whole GPUs through
// DRA or the device plugin, a fixed MIG layout's strategy), refuses before anything is
// created what could never run (a queue that does not exist, a name taken, objects the API
// server or Allot's webhooks refuse, a request no node holds), and creates the objects.
// `allot submit` and the console's Submit page both go through it, with the submitter's
// own identity, so that both take the same defaults and say the same words.
package submission

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/client/clientset/versioned"
	"github.com/allot-dev/allot/kube/convert"
	"github.com/allot-dev/allot/kube/dra"
	"github.com/allot-dev/allot/kube/inspect"
	"github.com/allot-dev/allot/kube/submit"
)

// Clients are the submitter's: every read and write is theirs, so that Kubernetes' RBAC
// and Allot's webhooks judge them, not whoever relays the submission.
type Clients struct {
	Client kubernetes.Interface
	Allot  versioned.Interface
	// Nodes, when set, reads the nodes (and DRA's devices) in Client's place: the console
	// reads them as itself. What nodes a cluster has is shown to everyone signed in to the
	// console, while a researcher's own identity may not list them (the chart's
	// researcher role, bound only to researchers.groups, is what grants it).
	Nodes kubernetes.Interface
}

// nodes are the cluster's GPU nodes, empty: what could ever hold a submission.
func (c Clients) nodes(ctx context.Context) ([]inspect.Node, error) {
	if c.Nodes != nil {
		return inspect.EmptyNodes(ctx, c.Nodes)
	}
	return inspect.EmptyNodes(ctx, c.Client)
}

// How whole GPUs are asked for (allot submit --gpu-api).
const (
	GPUAPIAuto         = "auto"
	GPUAPIDevicePlugin = "device-plugin"
	GPUAPIDRA          = "dra"
)

// Settle fills in what s leaves to the cluster: its workspace template (read from the
// cluster even offline: a dry run with --template connects), another vendor's kind (accelerator, as
// --accelerator names it), whether whole GPUs are claimed through DRA (gpuAPI: auto, the
// pool's nodes decide) and a fixed MIG layout's strategy. offline (a dry run that reads
// nothing) leaves the cluster's part to the defaults. known is false for a kind only the
// scheduler defines (then no node of it can be judged here); note says what was chosen
// for the submitter where it is not what they might assume.
func Settle(ctx context.Context, cl Clients, s *submit.Spec, gpuAPI, accelerator string, offline bool) (note string, known bool, err error) {
	known = true
	// The template first: what it fills in (GPUs, a type) decides the rest.
	if s.TemplateName != "" && s.Template == nil {
		if s.Template, err = Template(ctx, cl.Allot, s.Namespace, s.TemplateName); err != nil {
			return "", known, err
		}
	}
	*s = s.WithTemplate()
	if accelerator != "" {
		k, isKnown, err := convert.SubmitKind(accelerator)
		if err != nil {
			return "", false, err
		}
		s.Accelerator, s.AcceleratorResource, known = k.Name, k.Resources[0], isKnown
		if gpuAPI == GPUAPIAuto {
			gpuAPI = GPUAPIDevicePlugin // other vendors' devices are not claimed through DRA here
		}
	}
	if (s.MIG != "" || s.MIGDynamic != "") && gpuAPI == GPUAPIAuto {
		gpuAPI = GPUAPIDevicePlugin // MIG instances are asked of the device plugin or of Allot, not claimed
	}
	switch gpuAPI {
	case GPUAPIDevicePlugin:
	case GPUAPIDRA, GPUAPIAuto:
		if offline {
			if gpuAPI == GPUAPIDRA {
				s.DeviceClass = dra.DefaultGPUClasses[0]
			}
			break
		}
		// Of a list of pools, the first decides: the one the workload tries first.
		first, _, _ := strings.Cut(s.NodePool, ",")
		if first = strings.TrimSpace(first); first == v1alpha1.DefaultPool {
			first = ""
		}
		only, memMi, err := gpusThroughDRA(ctx, cl, first)
		if err != nil {
			return "", known, err
		}
		if only || gpuAPI == GPUAPIDRA {
			s.DeviceClass, s.DeviceMemoryMi = dra.DefaultGPUClasses[0], memMi
		}
	default:
		return "", known, fmt.Errorf("--gpu-api %q is not allowed: auto, device-plugin or dra", gpuAPI)
	}
	note, err = chooseMIGStrategy(ctx, cl, s, offline)
	return note, known, err
}

// Submit checks a submission's objects (Check, after the queue's existence) and creates
// them.
func Submit(ctx context.Context, cl Clients, s submit.Spec, objs []runtime.Object, known bool) error {
	if err := QueueExists(ctx, cl.Allot, s.Queue); err != nil {
		return err
	}
	if err := Check(ctx, cl, s, objs, known); err != nil {
		return err
	}
	for _, o := range objs {
		if err := Create(ctx, cl.Client, s.Namespace, o, false); err != nil {
			return err
		}
	}
	return nil
}

// YAML is a submission's objects as allot submit --dry-run prints them and the console's
// preview shows them: YAML documents separated by ---.
func YAML(objs []runtime.Object) (string, error) {
	var b strings.Builder
	for i, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.String(), nil
}
