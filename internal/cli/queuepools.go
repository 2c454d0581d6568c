package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/allot-dev/allot/api/v1alpha1"
	"github.com/allot-dev/allot/kube/convert"
)

// The flags of allot queue create and edit for node pools: a quota, limit and weight of
// its own per pool (spec.gpu.pools) and the pools each class of work tries in order
// (spec.classNodePools).

// poolQuotaFlags are --pool-quota, --pool-limit and --pool-weight, each POOL=N,… .
type poolQuotaFlags struct {
	quota, limit, weight []string
	classPools           []string // CLASS=POOL,POOL
}

// setPools writes the pool flags the user set into the spec.
func (f *poolQuotaFlags) setPools(set func(string) bool, s *v1alpha1.QueueSpec) error {
	for _, flag := range []struct {
		name   string
		values []string
		write  func(p *v1alpha1.PoolQuota, n *int32)
	}{
		{"pool-quota", f.quota, func(p *v1alpha1.PoolQuota, n *int32) { p.Quota = *n }},
		{"pool-limit", f.limit, func(p *v1alpha1.PoolQuota, n *int32) { p.Limit = n }},
		{"pool-weight", f.weight, func(p *v1alpha1.PoolQuota, n *int32) { p.OverQuotaWeight = n }},
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
