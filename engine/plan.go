package engine

import "fmt"

// Plan is the outcome of one cycle: what to bind, what to evict, and why the rest waits.
type Plan struct {
	Binds     []Bind
	Evictions []Eviction
	// Pending holds a reason for every job that still has pods without a place.
	Pending map[JobID]Reason
	// Queues is the accounting of every queue after the plan is applied.
	Queues map[QueueID]QueueStatus
	// Grow says, for elastic jobs with a Growth, how many more members their workload
	// should be asked for: that many fit now on free capacity, within the job's fair share
	// or lent idle. Nothing is bound for them; the members, once made, wait as any pod.
	Grow map[JobID]GrowBy
}

// Empty reports whether the plan changes nothing in the cluster.
func (p *Plan) Empty() bool { return len(p.Binds) == 0 && len(p.Evictions) == 0 && len(p.Grow) == 0 }

// Bind places a pod.
type Bind struct {
	Job     JobID
	Pod     PodID
	Binding Binding
}

// Eviction removes a running pod; Reason says who needed it and why that was allowed.
type Eviction struct {
	Job    JobID
	Pod    PodID
	Reason Reason
	// For is the job the eviction makes room for.
	For JobID
}

// QueueStatus is a queue's accounting for reports and the queue's status object.
type QueueStatus struct {
	FairShare               Resources
	Allocated               Resources
	AllocatedNonPreemptible Resources
	Requested               Resources
	Running, Pending        int
}

// ReasonCode classifies a reason so that programs can act on it; Message is for people.
type ReasonCode int

const (
	ReasonNone ReasonCode = iota
	ReasonFairShare
	ReasonQueueLimit
	ReasonNonPreemptibleQuota
	ReasonNoFit
	ReasonGangPartial
	ReasonConstraint
	ReasonTooLarge
	ReasonReclaimed
	ReasonPreempted
	ReasonConsolidated
	ReasonElasticWaiting
	ReasonNotTried
	ReasonGangIncomplete
	ReasonInvalid
	// ReasonBurst: evicted for using GPU memory past its request that another pod's
	// request needed; or waiting for such memory to be given back.
	ReasonBurst
	// ReasonInterrupted: evicted because its node goes (a spot notice), once the
	// checkpoint grace has passed; each such eviction counts against the job's budget.
	ReasonInterrupted
)

var reasonCodeNames = [...]string{
	"None", "FairShare", "QueueLimit", "NonPreemptibleQuota", "NoFit", "GangPartial",
	"Constraint", "TooLarge", "Reclaimed", "Preempted", "Consolidated", "ElasticWaiting", "NotTried",
	"GangIncomplete", "Invalid", "Burst", "Interrupted",
}

func (c ReasonCode) String() string {
	if int(c) < len(reasonCodeNames) {
		return reasonCodeNames[c]
	}
	return fmt.Sprintf("ReasonCode(%d)", int(c))
}

// Reason is an explanation a person can act on.
type Reason struct {
	Code    ReasonCode
	Message string
}

func (r Reason) String() string { return r.Message }

func reasonf(code ReasonCode, format string, args ...any) Reason {
	return Reason{Code: code, Message: fmt.Sprintf(format, args...)}
}
