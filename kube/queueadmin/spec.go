// Package queueadmin turns what an admin asks of a queue into its spec, and writes it:
// allot queue create and edit's flags, and the console's queue form, which sends the same
// fields under the flags' names, so that both refuse the same values in the same words.
package queueadmin

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// Flags are the fields an admin set, by allot queue create and edit's flag names, each
// with its values (a list flag's several, another's one). A field left out is left as the
// queue has it.
type Flags map[string][]string

// Names are the fields, in the order the help lists them.
var Names = []string{"quota", "limit", "weight", "priority", "parent", "interactive-time-limit", "reclaim-min-runtime",
	"preempt-min-runtime", "idle-timeout", "idle-threshold", "class", "namespaces", "node-pools", "pool-quota", "pool-limit",
	"pool-weight", "class-node-pools", "host-paths"}

// fields are the flags read into their types.
type fields struct {
	quota, weight, priority  int
	limit, parent, timeLimit string
	reclaimMin, preemptMin   string
	namespaces, pools        []string
	idleTimeout              []string
	idleThreshold            int
	class, hostPaths         string
	poolQuota, poolLimit     []string
	poolWeight, classPools   []string
}

func read(flags Flags) (fields, error) {
	f := fields{weight: -1}
	one := func(name string) string {
		if v := flags[name]; len(v) > 0 {
			return strings.TrimSpace(v[0])
		}
		return ""
	}
	for name := range flags {
		if !slices.Contains(Names, name) {
			return f, fmt.Errorf("%q is not a field of a queue: one of %s", name, strings.Join(Names, ", "))
		}
	}
	for name, into := range map[string]*int{"quota": &f.quota, "weight": &f.weight, "priority": &f.priority, "idle-threshold": &f.idleThreshold} {
		if _, ok := flags[name]; !ok {
			continue
		}
		n, err := strconv.Atoi(one(name))
		if err != nil {
			return f, fmt.Errorf("--%s %q is not allowed: a whole number", name, one(name))
		}
		*into = n
	}
	f.limit, f.parent, f.timeLimit = one("limit"), one("parent"), one("interactive-time-limit")
	f.reclaimMin, f.preemptMin, f.class, f.hostPaths = one("reclaim-min-runtime"), one("preempt-min-runtime"), one("class"), one("host-paths")
	f.namespaces, f.pools, f.idleTimeout = flags["namespaces"], flags["node-pools"], flags["idle-timeout"]
	f.poolQuota, f.poolLimit, f.poolWeight, f.classPools = flags["pool-quota"], flags["pool-limit"], flags["pool-weight"], flags["class-node-pools"]
	return f, nil
}

// Apply writes the fields an admin set into a queue's spec, refusing a value the flag
// would refuse, naming the flag and what it allows.
func Apply(flags Flags, s *v1alpha1.QueueSpec) error {
	f, err := read(flags)
	if err != nil {
		return err
	}
	set := func(name string) bool { _, ok := flags[name]; return ok }
	// The fields are int32: a larger number would wrap round.
	tooBig := func(flag string, v int) error {
		if v > math.MaxInt32 {
			return fmt.Errorf("--%s %d is not allowed: at most %d", flag, v, math.MaxInt32)
		}
		return nil
	}
	if set("quota") {
		if f.quota < 0 {
			return fmt.Errorf("--quota %d is not allowed: 0 or more GPUs", f.quota)
		}
		if err := tooBig("quota", f.quota); err != nil {
			return err
		}
		s.GPU.Quota = int32(f.quota)
	}
	optional := func(flag string, v int, field **int32) error {
		if !set(flag) {
			return nil
		}
		if v < 0 {
			*field = nil
			return nil
		}
		if err := tooBig(flag, v); err != nil {
			return err
		}
		n := int32(v)
		*field = &n
		return nil
	}
	if set("limit") {
		// An unlimited queue is one without --limit; -1 meant that once and is refused
		// now, with the way to say it.
		n, err := strconv.Atoi(f.limit)
		switch {
		case f.limit == "none":
			s.GPU.Limit = nil
		case err != nil || n < 0:
			return fmt.Errorf("--limit %q is not allowed: a whole number of GPUs, 0 or more; for no cap leave --limit out (allot queue edit NAME --limit none removes a cap)", f.limit)
		default:
			if err := tooBig("limit", n); err != nil {
				return err
			}
			l := int32(n)
			s.GPU.Limit = &l
		}
	}
	if err := optional("weight", f.weight, &s.GPU.OverQuotaWeight); err != nil {
		return err
	}
	if set("priority") {
		if err := tooBig("priority", f.priority); err != nil {
			return err
		}
		if f.priority < math.MinInt32 {
			return fmt.Errorf("--priority %d is not allowed: at least %d", f.priority, math.MinInt32)
		}
		s.Priority = int32(f.priority)
	}
	if set("parent") {
		s.Parent = f.parent
	}
	if set("interactive-time-limit") {
		d, err := time.ParseDuration(f.timeLimit)
		if err != nil || d <= 0 {
			return fmt.Errorf("--interactive-time-limit %q is not allowed: a positive duration such as 30m, 4h or 1h30m", f.timeLimit)
		}
		s.InteractiveTimeLimit = &metav1.Duration{Duration: d}
	}
	for flag, field := range map[string]**metav1.Duration{"reclaim-min-runtime": &s.ReclaimMinRuntime, "preempt-min-runtime": &s.PreemptMinRuntime} {
		if !set(flag) {
			continue
		}
		v := map[string]string{"reclaim-min-runtime": f.reclaimMin, "preempt-min-runtime": f.preemptMin}[flag]
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("--%s %q is not allowed: a duration such as 10m or 1h30m (0s for none)", flag, v)
		}
		*field = &metav1.Duration{Duration: d}
	}
	if set("idle-timeout") {
		if err := idleTimeouts(f.idleTimeout, s); err != nil {
			return err
		}
	}
	if set("idle-threshold") {
		switch {
		case f.idleThreshold == 0:
			s.IdleThreshold = nil
		case f.idleThreshold < 1 || f.idleThreshold > 100:
			return fmt.Errorf("--idle-threshold %d is not allowed: a percentage of GPU utilisation from 1 to 100 (0 for the default, %d)", f.idleThreshold, v1alpha1.DefaultIdleThreshold)
		default:
			n := int32(f.idleThreshold)
			s.IdleThreshold = &n
		}
	}
	if set("class") {
		switch f.class {
		case "none":
			s.Class = ""
		case v1alpha1.ClassTrain, v1alpha1.ClassInteractive, v1alpha1.ClassInference:
			s.Class = f.class
		default:
			return fmt.Errorf("--class %q is not allowed: train, interactive or inference (none on edit removes it)", f.class)
		}
	}
	if set("namespaces") {
		s.Namespaces = f.namespaces
	}
	if set("node-pools") {
		s.NodePools = f.pools
	}
	if err := f.setPools(set, s); err != nil {
		return err
	}
	if set("host-paths") {
		switch f.hostPaths {
		case "any":
			s.HostPaths = nil
		case "none":
			s.HostPaths = &v1alpha1.HostPathPolicy{}
		default:
			rule := &v1alpha1.HostPathPolicy{}
			for _, d := range strings.Split(f.hostPaths, ",") {
				if d = strings.TrimSpace(d); !path.IsAbs(d) {
					return fmt.Errorf("--host-paths %q is not allowed: absolute directories of the node, comma-separated (/data,/scratch); none for no path; any on edit removes the rule", f.hostPaths)
				}
				rule.Allowed = append(rule.Allowed, path.Clean(d))
			}
			s.HostPaths = rule
		}
	}
	return nil
}

// idleTimeouts reads --idle-timeout interactive=2h,inference=30m into a Queue's spec;
// CLASS=none removes that class's timeout.
func idleTimeouts(values []string, s *v1alpha1.QueueSpec) error {
	for _, v := range values {
		class, d, ok := strings.Cut(v, "=")
		var field **metav1.Duration
		if s.IdleTimeout == nil {
			s.IdleTimeout = &v1alpha1.IdleTimeout{}
		}
		switch class {
		case v1alpha1.ClassInteractive:
			field = &s.IdleTimeout.Interactive
		case v1alpha1.ClassInference:
			field = &s.IdleTimeout.Inference
		}
		if !ok || field == nil {
			return fmt.Errorf("--idle-timeout %q is not allowed: CLASS=DURATION, CLASS interactive or inference, such as interactive=2h,inference=30m", v)
		}
		if d == "none" {
			*field = nil
			continue
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur < time.Second {
			return fmt.Errorf("--idle-timeout %s=%q is not allowed: a duration of at least 1s, such as 30m, 2h or 1h30m (none removes it)", class, d)
		}
		*field = &metav1.Duration{Duration: dur}
	}
	if s.IdleTimeout != nil && s.IdleTimeout.Interactive == nil && s.IdleTimeout.Inference == nil {
		s.IdleTimeout = nil
	}
	return nil
}

// The node-pool fields: a quota, limit and weight of the queue's own per pool
// (spec.gpu.pools) and the pools each class of work tries in order (spec.classNodePools).

// setPools writes the pool flags the user set into the spec.
func (f *fields) setPools(set func(string) bool, s *v1alpha1.QueueSpec) error {
	for _, flag := range []struct {
		name   string
		values []string
		write  func(p *v1alpha1.PoolQuota, n *int32)
	}{
		{"pool-quota", f.poolQuota, func(p *v1alpha1.PoolQuota, n *int32) { p.Quota = *n }},
		{"pool-limit", f.poolLimit, func(p *v1alpha1.PoolQuota, n *int32) { p.Limit = n }},
		{"pool-weight", f.poolWeight, func(p *v1alpha1.PoolQuota, n *int32) { p.OverQuotaWeight = n }},
	} {
		if !set(flag.name) {
			continue
		}
		for _, v := range flag.values {
			pool, num, ok := strings.Cut(v, "=")
			if _, err := convert.ParsePools(pool); !ok || err != nil || pool == v1alpha1.DefaultPool {
				return fmt.Errorf("--%s %q is not allowed: POOL=N, POOL being the value of its nodes' label %s (the default pool's GPUs are --quota, --limit and --weight)", flag.name, v, v1alpha1.LabelNodePool)
			}
			p := s.GPU.Pools[pool]
			if num == "none" {
				switch flag.name {
				case "pool-quota":
					delete(s.GPU.Pools, pool) // the pool is no longer this queue's own
					continue
				default:
					flag.write(&p, nil)
				}
			} else {
				n, err := strconv.Atoi(num)
				if err != nil || n < 0 || n > math.MaxInt32 {
					return fmt.Errorf("--%s %q is not allowed: a whole number of GPUs, 0 or more (none removes it)", flag.name, v)
				}
				m := int32(n)
				flag.write(&p, &m)
			}
			if s.GPU.Pools == nil {
				s.GPU.Pools = map[string]v1alpha1.PoolQuota{}
			}
			s.GPU.Pools[pool] = p
		}
	}
	if set("class-node-pools") {
		for _, v := range f.classPools {
			class, list, _ := strings.Cut(v, "=")
			switch class {
			case v1alpha1.ClassTrain, v1alpha1.ClassInteractive, v1alpha1.ClassInference:
			default:
				return fmt.Errorf("--class-node-pools %q is not allowed: CLASS=POOL,POOL with CLASS train, interactive or inference (CLASS=none removes it)", v)
			}
			if list == "none" {
				delete(s.ClassNodePools, class)
				continue
			}
			pools, err := convert.ParsePools(list)
			if err != nil {
				return fmt.Errorf("--class-node-pools %q: %w", v, err)
			}
			if s.ClassNodePools == nil {
				s.ClassNodePools = map[string]v1alpha1.PoolList{}
			}
			s.ClassNodePools[class] = pools
		}
	}
	return nil
}
