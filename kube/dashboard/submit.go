package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/allot-dev/allot/kube/submission"
	"github.com/allot-dev/allot/kube/submit"
)

// SubmitForm is what the console's Submit page sends (POST /api/submit): allot submit's
// flags, under their names, so that the same words explain a refusal in both.
type SubmitForm struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	// Type is train (the default), distributed (with Workers), interactive or inference.
	Type    string   `json:"type,omitempty"`
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	// GPU is -g: whole GPUs, or a fraction of one; GPUMemory --gpu-memory.
	GPU       string `json:"gpu,omitempty"`
	GPUMemory string `json:"gpuMemory,omitempty"`
	// Workers is --workers: N, or MIN:MAX for an elastic job. Replicas is inference's
	// --replicas: N, or MIN:MAX.
	Workers  string   `json:"workers,omitempty"`
	Replicas string   `json:"replicas,omitempty"`
	CPU      string   `json:"cpu,omitempty"`
	Memory   string   `json:"memory,omitempty"`
	Env      []string `json:"env,omitempty"`
	Port     int      `json:"port,omitempty"`
	NodePool string   `json:"nodePool,omitempty"`
	// Preemptible is --preemptible (true) or --non-preemptible (false); unset, the type's.
	Preemptible *bool `json:"preemptible,omitempty"`
	// Duration is --duration, for simulated nodes (allot up): finish after this long.
	Duration string `json:"duration,omitempty"`
	// GPUAPI is --gpu-api: auto (the default), device-plugin or dra.
	GPUAPI string `json:"gpuApi,omitempty"`
	// Template is --template: a workspace template the fields left empty come from.
	Template string `json:"template,omitempty"`
}

// SubmitResult answers /api/submit: the objects (as allot submit --dry-run prints them),
// and with ?preview the queue's room and what the checks said, before anything is made.
type SubmitResult struct {
	Objects string `json:"objects"`
	Room    *Room  `json:"room,omitempty"`
	// Problem is why the submission would be refused (preview only): the same check
	// submit makes, a server-side dry run of every object as the person included.
	Problem string `json:"problem,omitempty"`
	// Message says what was done (submit only), as allot submit says it.
	Message string `json:"message,omitempty"`
}

// Room is what the queue has for a submission, from the state the person may see.
type Room struct {
	Queue     string   `json:"queue"`
	Quota     float64  `json:"quota"`
	Limit     *float64 `json:"limit,omitempty"`
	Allocated float64  `json:"allocated"`
	// Asking is the GPUs the submission asks for, all its pods together.
	Asking float64 `json:"asking"`
	// Idle is the cluster's GPUs no pod holds.
	Idle float64 `json:"idle"`
	// Outlook says, in words, how the submission stands against the queue and the
	// cluster: within quota or borrowing, and whether GPUs are free for it.
	Outlook string `json:"outlook"`
	// Waiting are the queue's workloads waiting now, with the scheduler's reason for each.
	Waiting []WaitingWorkload `json:"waiting,omitempty"`
}

// WaitingWorkload is one of a queue's waiting workloads and why, as the scheduler says.
type WaitingWorkload struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// spec turns the form into allot submit's spec, refusing what the flags would refuse.
func (f SubmitForm) spec() (submit.Spec, error) {
	s := submit.Spec{Name: strings.TrimSpace(f.Name), Namespace: strings.TrimSpace(f.Namespace), Queue: strings.TrimSpace(f.Queue),
		Image: strings.TrimSpace(f.Image), Command: f.Command, GPUs: strings.TrimSpace(f.GPU), GPUMemory: strings.TrimSpace(f.GPUMemory),
		CPU: strings.TrimSpace(f.CPU), Memory: strings.TrimSpace(f.Memory), Env: f.Env, Port: f.Port, NodePool: strings.TrimSpace(f.NodePool),
		Preemptible: f.Preemptible, TemplateName: strings.TrimSpace(f.Template)}
	if s.Namespace == "" {
		return s, fmt.Errorf("namespace is required: the namespace the workload is made in (one you may create workloads in)")
	}
	switch f.Type {
	case "", submit.TypeTrain:
	case submit.TypeDistributed:
		if strings.TrimSpace(f.Workers) == "" {
			return s, fmt.Errorf("--workers is required for distributed training: a number of workers (2), or MIN:MAX for an elastic job")
		}
	case submit.TypeInteractive:
		s.Interactive = true
	case submit.TypeInference:
		s.Inference = true
	default:
		return s, fmt.Errorf("type %q is not allowed: train, distributed, interactive or inference", f.Type)
	}
	if w := strings.TrimSpace(f.Workers); w != "" {
		n, min, err := submit.ParseWorkers(w)
		if err != nil {
			return s, err
		}
		s.Workers, s.MinWorkers = n, min
	}
	if r := strings.TrimSpace(f.Replicas); r != "" {
		min, max, err := submit.ParseReplicas(r)
		if err != nil {
			return s, err
		}
		s.MinReplicas, s.MaxReplicas = min, max
	}
	if d := strings.TrimSpace(f.Duration); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil || v < 0 {
			return s, fmt.Errorf("--duration %q is not allowed: a duration such as 90s or 2h", d)
		}
		s.Duration = v
	}
	return s, nil
}

// submit serves POST /api/submit: with ?preview the objects, the queue's room and the
// checks' verdict, making nothing; without, the submission made as the person.
func (s *Server) submit(ctx context.Context, w http.ResponseWriter, r *http.Request, id *Identity, a *actor) {
	var f SubmitForm
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&f); err != nil {
		writeError(w, http.StatusBadRequest, "the submission is not a JSON form: "+err.Error())
		return
	}
	spec, err := f.spec()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	gpuAPI := f.GPUAPI
	if gpuAPI == "" {
		gpuAPI = submission.GPUAPIAuto
	}
	note, known, err := submission.Settle(ctx, a.submit, &spec, gpuAPI, "", false)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	objs, err := spec.Objects()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	res := SubmitResult{}
	if res.Objects, err = submission.YAML(objs); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if r.URL.Query().Has("preview") {
		res.Room = s.room(ctx, id, spec)
		if err := submission.QueueExists(ctx, a.submit.Allot, spec.Queue); err != nil {
			res.Problem = err.Error()
		} else if err := submission.Check(ctx, a.submit, spec, objs, known); err != nil {
			res.Problem = err.Error()
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	if err := submission.Submit(ctx, a.submit, spec, objs, known); err != nil {
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	res.Message = fmt.Sprintf("%s %s submitted to queue %s in namespace %s", spec.Type(), spec.Name, spec.Queue, spec.Namespace)
	if note != "" {
		res.Message += " (" + note + ")"
	}
	writeJSON(w, http.StatusCreated, res)
}

// templates serves GET /api/templates?namespace=NS: the workspace templates the person
// may use there, the namespace's first, for the Submit page to offer.
func (s *Server) templates(w http.ResponseWriter, r *http.Request, id *Identity) {
	a, err := s.actorFor(r, id)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, submission.Templates(ctx, a.submit.Allot, r.URL.Query().Get("namespace")))
}

// room is the queue's room for spec as the person may see the queue; nil where they may
// not see it.
func (s *Server) room(ctx context.Context, id *Identity, spec submit.Spec) *Room {
	st, _, _ := s.current()
	if id != nil && s.access != nil {
		if v := s.access.viewer(ctx, id, &st); !v.Admin() {
			st = Filter(st, v)
		}
	}
	for _, q := range st.Queues {
		if q.Name != spec.Queue {
			continue
		}
		room := &Room{Queue: q.Name, Quota: q.Quota, Limit: q.Limit, Allocated: q.Allocated, Idle: st.Totals.Idle, Asking: asking(spec)}
		for _, wl := range st.Workloads {
			if wl.Queue == q.Name && wl.Status == "Pending" {
				room.Waiting = append(room.Waiting, WaitingWorkload{Name: wl.Namespace + "/" + wl.Name, Reason: wl.Reason})
			}
		}
		room.Outlook = outlook(*room)
		return room
	}
	return nil
}

// outlook says how a submission stands: what the scheduler's rules give a queue at these
// figures (docs/design.md: quota first, idle GPUs lent beyond it and taken back).
func outlook(r Room) string {
	after := r.Allocated + r.Asking
	ahead := ""
	if n := len(r.Waiting); n > 0 {
		ahead = fmt.Sprintf("; %d of the queue's workloads wait now (their reasons below)", n)
	}
	switch {
	case r.Limit != nil && after > *r.Limit:
		return fmt.Sprintf("past the queue's limit of %s GPUs (%s held, %s asked): it waits until the queue holds less%s", num(*r.Limit), num(r.Allocated), num(r.Asking), ahead)
	case after <= r.Quota && r.Asking <= r.Idle:
		return fmt.Sprintf("within the queue's quota (%s of %s GPUs after it) and %s GPUs are free: it should start at once, where a node holds it whole%s", num(after), num(r.Quota), num(r.Idle), ahead)
	case after <= r.Quota:
		return fmt.Sprintf("within the queue's quota (%s of %s GPUs after it), but only %s GPUs are free: GPUs lent to other queues are taken back for it%s", num(after), num(r.Quota), num(r.Idle), ahead)
	case r.Asking <= r.Idle:
		return fmt.Sprintf("beyond the queue's quota (%s of %s GPUs after it): it borrows idle GPUs (%s free), which may be taken back when their queues want them%s", num(after), num(r.Quota), num(r.Idle), ahead)
	}
	return fmt.Sprintf("beyond the queue's quota (%s of %s GPUs after it) with %s GPUs free: it waits until GPUs are freed%s", num(after), num(r.Quota), num(r.Idle), ahead)
}

// asking is the GPUs a submission's pods ask to start, together: a gang's (or an elastic
// job's least) members, each its whole GPUs or its slices. MIG instances count as none
// here (they are parts of GPUs the quota does not count whole).
func asking(spec submit.Spec) float64 {
	r := spec.Request()
	per := float64(r.GPUs)
	if r.Fraction > 0 {
		per = r.Fraction * float64(max(spec.GPUCount, 1))
	}
	return per * float64(max(r.Pods, 1))
}

func num(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}
